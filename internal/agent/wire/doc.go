// Package wire is the protocol between berth's daemon and the agent in
// every sandbox: the request header, the frames and the JSON messages
// they carry, shared by the client (internal/agent) and the agent itself
// (internal/agent/agentd). Agents already running in sandboxes speak these
// bytes, so they only ever gain optional fields (wire_test.go pins them).
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
//	12 gap       agent→client  proc_attach only: {"skipped":N} bytes of
//	                           output the ring dropped before this reader
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
//	proc_start  → result ProcInfo            (fields exec, proc: tag, restart, max_restarts)
//	proc_list   → result ProcListHead, result ProcInfo × count, end
//	proc_attach ← stdin*, stdin-eof, resize*, signal*; → gap*, stdout*, stderr*, then exit or end
//	proc_stdin  ← stdin*, then stdin-eof (close it) or end (keep it open); → end
//	proc_signal → end                        (fields proc.signal, proc.stop)
//	proc_wait   → exit                       (when the process has ended for good)
//
// # Background processes
//
// proc_start runs a process that outlives its connection: the agent
// assigns it an id (a decimal number, unique for the agent's lifetime,
// whose boot id ping and proc_list report) and keeps it in a table of at
// most MaxProcs running processes and the MaxProcExits most recently ended
// ones (oldest dropped first). A tag (a letter, then letters, digits, '_',
// '.', '-') is unique among running processes; the other ops take an id or
// a tag (the running process with it, else the newest). Its stdout and
// stderr are read as produced into a ring of the last ProcRingBytes, kept
// with their stream; an attach replays the ring and, with follow, streams
// new output live. The process never waits for an attacher: one that reads
// slowly gets a gap frame with the bytes it missed. Several attachers may
// be attached at once; leaving does not touch the process. A command that
// cannot be found or executed still makes a process, which ends at once
// with 127 or 126 and the reason in its output. A process with restart
// always (or on-failure, after a non-zero exit) is run again, with the
// same id and ring, after a backoff doubling from 250ms to 30s, at most
// max_restarts times (10 by default, 1000 at most); a signal with stop ends
// that. The agent's shutdown kills every background process.
//
// An exec that cannot start its command answers like a shell: the reason
// on stderr (stdout under TTY) and exit 127 (not found) or 126 (not
// executable); under TTY, TERM is xterm-256color unless the request sets it.
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
// The messages' encoding is pinned by golden JSON (wire_test.go), so an
// agent already running in a sandbox keeps working with a newer daemon
// however the REST API changes. An error frame's message passes through
// SafeMessage (control characters and invalid bytes escaped, cut at a rune
// boundary to 1 KiB) before it can reach an event, a log line or an API
// answer.
package wire
