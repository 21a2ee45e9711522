#!/bin/sh
# Regenerates internal/e2b/envdpb's Go code from its .proto files: protoc
# (Debian's protobuf-compiler, scripts/install-deps.sh) with protoc-gen-go
# and protoc-gen-connect-go built at the versions go.mod pins.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
cd "$root"
go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
go build -o "$bin/protoc-gen-connect-go" connectrpc.com/connect/cmd/protoc-gen-connect-go
cd internal/e2b/envdpb
PATH="$bin:$PATH" protoc -I . -I /usr/include \
	--go_out=. --go_opt=paths=source_relative \
	--connect-go_out=. --connect-go_opt=paths=source_relative \
	process/process.proto filesystem/filesystem.proto
