// Package agentd is berth's in-sandbox agent: what runs as PID 1 of every
// sandbox and serves the daemon's operations (exec and PTYs, files and
// tar, port dials, quiesce for checkpoints, seccomp install, reaping).
// The daemon's side is internal/agent; the protocol is internal/agent/wire.
//
// The berth binary is bind-mounted read-only into every sandbox and runs as
// its PID 1 ("berth agent --socket /.berth/run/agent.sock", see Main). The
// socket's directory is a bind mount of a per-sandbox directory on the
// host, so the daemon dials it directly: an exec is a round trip of about a
// millisecond, and since the agent keeps no state about the daemon (every
// operation is its own connection) it keeps working across daemon restarts.
//
// # Trust model
//
// The agent runs with root's powers inside the sandbox and no others: the
// sandbox's user namespace, dropped capabilities and seccomp bound what it
// can do, so the agent itself is not a security boundary for exec. Its
// socket is mode 0600, so only the host daemon and the sandbox's root can
// connect. File operations are confined to Config.Root by the kernel:
// every path is resolved with rootfs.Openat2(RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS)
// from an fd on the root, so "..", absolute symlinks and /proc magic links
// cannot lead out of it (which matters when Root is not "/"), and every
// step after that is fd-relative. Tar uploads are hostile input even
// inside the sandbox: each entry's parents are resolved with
// RESOLVE_BENEATH from the destination, the last component is never
// followed, and the caps (entries, bytes, path length) hold.
package agentd
