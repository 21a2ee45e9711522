// Package agentd is berth's in-sandbox agent: what runs as PID 1 of every
// sandbox and serves the daemon's operations (exec and PTYs, files and
// tar, port dials, quiesce for checkpoints, seccomp install, reaping).
// The daemon's side is internal/agent; the protocol is internal/agent/wire.
//
// The berth-agent binary (cmd/berth-agent) is bind-mounted read-only into
// every sandbox at /.berth/berth and runs as its PID 1 (see Main). Under
// runc it serves on a socket the daemon bound in a root-only directory the
// sandbox cannot see and passed in as fd 3 (--listen-fd); under gVisor it
// binds /.berth/run/agent.sock on a small tmpfs (--socket) and the daemon
// pins that socket (internal/node/local/agentchan); on Kubernetes it
// listens on TCP under mutual TLS (--listen-tcp, package agenttls). An exec
// is a round trip of about a millisecond, and since the agent keeps no
// state about the daemon (every operation is its own connection) it keeps
// working across daemon restarts.
//
// # Trust model
//
// The agent runs with root's powers inside the sandbox and no others: the
// sandbox's user namespace, dropped capabilities and seccomp bound what it
// can do, so the agent itself is not a security boundary for exec. File operations are confined to Config.Root by the kernel:
// every path is resolved with rootfs.Openat2(RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS)
// from an fd on the root, so "..", absolute symlinks and /proc magic links
// cannot lead out of it (which matters when Root is not "/"), and every
// step after that is fd-relative. Tar uploads are hostile input even
// inside the sandbox: each entry's parents are resolved with
// RESOLVE_BENEATH from the destination, the last component is never
// followed, and the caps (entries, bytes, path length) hold.
//
// # What else it does
//
// As PID 1 it reaps, installs the seccomp program the daemon compiled
// (runc class: a sealed memfd, fd 4) on all its threads before it reads any
// input, drops every signal (the daemon ends sandboxes through their
// cgroup), and keeps the sandbox's /etc/hosts (hosts.go: localhost and the
// hostname added to the image's own lines, rewritten by rename at start and
// when the hostname changed, e.g. at a warm-pool claim, so the hostname
// never goes to DNS; a hosts file that is a mount or not a regular file is
// left alone). It also carries the runsc helpers (the Sentry's task limit,
// tasklimit.go; a claimed pool member's host name, hostname.go).
//
// Exec runs the command in its own process group, with PTYs and
// timeouts; a command that cannot start exits 127 or 126 with the reason on
// stderr, and a TTY gets TERM=xterm-256color unless given. dial
// (portdial.go) is the port proxy's way into sandboxes whose network the host
// cannot enter: a connection to 127.0.0.1 or ::1 inside, spliced both ways.
// Background processes (procs_bg.go): at most 32 running and the 32 last
// ended, each with a 1 MiB output ring that attachers read at their own pace
// (a slow one gets a gap frame; the process never waits), tags, stdin,
// signals, wait and restart supervision (always or on-failure, backoff 250
// ms doubling to 30 s, at most max_restarts). watch (watch.go): inotify
// through fds resolved in the root, MOVED_FROM/TO paired into renames,
// recursive watches following new dirs, capped per agent and request with a
// bounded queue that reports overflow. shutdown (shutdown.go) signals every
// process for a graceful stop; secret_files (secretfiles.go) fills the
// secrets tmpfs (docs/secrets.md). With --sudo-user (a sandbox created
// with sudo) it serves berth's sudo (sudo.go, package sudo): it accepts on
// an abstract socket, checks the caller's uid and starts a helper process
// per connection, reading nothing the caller sends.
//
// The same server serves a quarantined sandbox's files from the host
// (internal/node/local/hostfiles), then with Config.IDs (idshift.go) shifting
// owners from the host id range to the sandbox's own (unmapped ids read
// 65534).
package agentd
