// Package agent is berth's in-sandbox agent and the daemon's client for it.
//
// The berth binary is bind-mounted read-only into every sandbox and runs as
// its PID 1 ("berth agent --socket /.berth/run/agent.sock", see Main). The
// socket's directory is a bind mount of a per-sandbox directory on the
// host, so the daemon dials it directly: an exec is a round trip of about a
// millisecond, and since the agent keeps no state about the daemon (every
// operation is its own connection) it keeps working across daemon restarts.
//
// # Protocol
//
// One operation per unix-socket connection. The client sends one header
// line: a JSON object ending in '\n', at most 64 KiB,
//
//	{"v":1,"op":"exec","exec":{"argv":["ls"],"env":["PATH=/bin"],"dir":"/","tty":false,"timeout_ms":0}}
//	{"v":1,"op":"write_file","path":"/a/b","mode":420}
//
// and then both sides exchange frames: [1 byte type][4 byte big-endian
// payload length][payload], payload at most 1 MiB (writers of byte streams
// use 32 KiB). Frame types:
//
//	1 stdin      client→agent  bytes for the process's stdin (or the PTY)
//	2 stdin-eof  client→agent  stdin is closed (ignored under a TTY)
//	3 resize     client→agent  {"rows":R,"cols":C}: TIOCSWINSZ on the PTY
//	4 signal     client→agent  {"signal":"SIGINT"}: sent to the process group
//	5 stdout     agent→client  output as produced (all of it under a TTY)
//	6 stderr     agent→client
//	7 exit       agent→client  Exit: code (128+n when killed by
//	                           signal n), signal name, timed_out, duration_ms
//	8 error      agent→client  {"code":"not_found","message":"..."}; codes:
//	                           invalid_argument, not_found, conflict,
//	                           too_large, permission_denied, internal
//	9 data       both ways     file or tar bytes
//	10 end       both ways     end of a data stream; success without result
//	11 result    agent→client  JSON result
//
// Operations and their frames (an error frame may replace any answer, or
// end any stream, and is always the last frame):
//
//	ping        → result {version, pid, uptime_ns}
//	exec        ← stdin*, stdin-eof, resize*, signal*; → stdout*, stderr*, exit
//	stat        → result FileInfo (lstat: a symlink is described)
//	list        → result FileInfo per entry (by name, at most 100k), end
//	mkdir       → end                        (fields mode, parents)
//	remove      → end                        (field recursive; "/" refused)
//	read_file   → result FileInfo, data*, end   (regular files only)
//	write_file  ← data*, end; → result FileInfo (fields mode, uid, gid)
//	read_tar    → data* (a tar stream), end
//	write_tar   ← data* (a tar stream), end; → end  (fields uid, gid)
//
// An exec's process leads its own process group (its own session, with the
// PTY as controlling terminal, under TTY). Its output is read 32 KiB at a
// time and written to the connection before the next read, so a client
// that reads slowly makes the process block on its pipe: nothing is
// buffered without bound on either side. The connection closing before the
// exit frame (the client's context cancelled, the daemon gone) kills the
// process group, as does the timeout (and then timed_out is set). After
// the process exits, output still arriving from children that hold its
// pipes is forwarded briefly, then discarded without closing the pipe.
//
// # Trust model
//
// The agent runs with root's powers inside the sandbox and no others: the
// sandbox's user namespace, dropped capabilities and seccomp bound what it
// can do, so the agent itself is not a security boundary for exec. Its
// socket is mode 0600, so only the host daemon and the sandbox's root can
// connect. File operations are confined to Config.Root by the kernel:
// every path is resolved with openat2(RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS)
// from an fd on the root, so "..", absolute symlinks and /proc magic links
// cannot lead out of it (which matters when Root is not "/"), and every
// step after that is fd-relative. Tar uploads are hostile input even
// inside the sandbox: each entry's parents are resolved with
// RESOLVE_BENEATH from the destination, the last component is never
// followed, and the caps (entries, bytes, path length) hold.
//
// The daemon does not trust the agent either: it is code in the sandbox,
// which may be anyone's. The client caps every header, frame and JSON
// result it reads, never buffers a stream whole, maps error codes to
// errdefs categories only from a fixed set and cuts their messages short,
// and treats any other misbehaviour as an internal error of that one call.
package agent
