// Package agent is the daemon's client for berth's in-sandbox agent
// (internal/agent/agentd): one operation per unix-socket connection, in
// the protocol of internal/agent/wire, and the socket dialer that refuses
// a socket that is not the sandbox's own.
//
// The daemon does not trust the agent: it is code in the sandbox,
// which may be anyone's. The client caps every header, frame and JSON
// result it reads, never buffers a stream whole, maps error codes to
// errdefs categories only from a fixed set and cuts their messages short,
// and treats any other misbehaviour as an internal error of that one call.
//
// Client covers ping, exec with streaming stdio, PTY and resize, files, tar,
// DialPort and quiesce. Its wire types are the agent's own, not the API's:
// the engine converts in one file (internal/engine/wire.go). Over a network
// (the Kubernetes backend) the daemon dials with TLSDialer (tlsdial.go):
// every failed handshake is ErrPeerRefused, a refused connect or a cancelled
// context is not. FuzzClient plays a hostile agent against every call.
package agent
