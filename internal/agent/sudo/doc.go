// Package sudo is berth's narrow sudo: E2B's templates give their user
// passwordless sudo, and programs written for them call it, but a setuid
// sudo cannot work in a sandbox (no_new_privs, a nosuid /usr, the host's
// root files unmapped). A sandbox created with sudo (sandbox.Spec.Sudo)
// gets instead:
//
//   - the sudo program: the agent's own binary, bind-mounted read-only at
//     Dir/sudo (Dir first in its commands' PATH), which runs Main when
//     called by that name. It parses sudo's common options, then hands
//     the agent its argv, environment, working directory and its stdin,
//     stdout and stderr (SCM_RIGHTS) over the abstract unix socket
//     Socket, relays its signals, and ends as the command ended.
//   - the agent (internal/agent/agentd, sudo.go) listening on Socket. It
//     checks the caller's uid with SO_PEERCRED (root, or the sandbox's
//     sudo user), caps the connections it serves at once, and starts a
//     helper process per connection (HelperMain) without reading a byte
//     of it.
//   - the helper: it checks the caller again, reads the request within
//     its bounds (exactly three descriptors, MaxRequest bytes, MaxArgs
//     arguments, MaxEnv variables, no NUL bytes, an absolute working
//     directory), applies the policy (environment reset unless -E, the
//     target's HOME, SHELL, USER, SecurePath, SUDO_* from the kernel's
//     word on the caller) and runs the command as the target, in a
//     session of its own, with the caller's descriptors as its stdio. It
//     reports the exit code or signal and kills the command's group if
//     the caller goes away first.
//
// What sudo grants is what the sandbox's owner already has through the
// API (berth exec --user root, the E2B SDK's user: 'root'): root of the
// sandbox's user namespace with the sandbox's capabilities, seccomp,
// cgroup and no_new_privs, which every process the agent starts inherits.
// The helper runs with exactly that, so a caller that subverted it would
// hold what the request could have asked for anyway.
package sudo
