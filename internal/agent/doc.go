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
package agent
