// Package rootfs is the agent's file system access: every operation on
// the sandbox's files (stat, list, mkdir, remove, reads and writes of the
// agent's handlers, tar in and out, the passwd lookups of exec's user)
// resolves its path inside one root directory with
// openat2(RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS) from an fd on it, and
// works fd-relative after that, so "..", absolute symlinks and /proc magic
// links cannot lead out of it.
package rootfs
