// Package rootfs is the agent's file system access: every operation on
// the sandbox's files (stat, list, mkdir, remove, reads and writes of the
// agent's handlers, tar in and out, the passwd lookups of exec's user)
// resolves its path inside one root directory with
// openat2(RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS) from an fd on it, and
// works fd-relative after that, so "..", absolute symlinks and /proc magic
// links cannot lead out of it.
//
// Besides stat, list, mkdir and remove: move (move.go) is renameat2 on the
// two resolved parents by rename(2)'s rules, the last component of neither
// followed, RENAME_NOREPLACE on request; passwd and group lookups serve
// exec's user. File info carries the owner (uid/gid).
package rootfs
