// Package envdpb holds the Go types and Connect stubs of E2B's envd
// protocol (process.Process, filesystem.Filesystem), generated from the
// .proto files beside this file by scripts/gen-envdpb.sh (protoc from
// Debian's protobuf-compiler, protoc-gen-go and protoc-gen-connect-go at
// the versions go.mod pins). The generated code is committed.
package envdpb

//go:generate ../../../scripts/gen-envdpb.sh
