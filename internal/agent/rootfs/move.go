package rootfs

import (
	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Move renames src to dst inside the root by rename(2)'s rules: a file
// replaces a file (or a symlink), a directory replaces an empty
// directory; a directory onto a file, a file onto a directory and a
// directory onto a non-empty one are conflicts, as is any existing dst
// with noReplace. Both parents are resolved inside the root
// (RESOLVE_IN_ROOT) and the rename is fd-relative on them, so the last
// component of neither path is followed: a symlink is moved, or
// replaced, never its target. Moving a directory under itself is
// invalid; so is moving "/" or onto "/".
func (r *Root) Move(src, dst string, noReplace bool) error {
	sclean, srel, err := CleanPath(src)
	if err != nil {
		return err
	}
	dclean, drel, err := CleanPath(dst)
	if err != nil {
		return err
	}
	if srel == "." || drel == "." {
		return errdefs.Invalid("move %s to %s: cannot move / or onto /", sclean, dclean)
	}
	spfd, sname, err := r.OpenParent(sclean)
	if err != nil {
		return PathErr("move", sclean, err)
	}
	defer unix.Close(spfd)
	dpfd, dname, err := r.OpenParent(dclean)
	if err != nil {
		return PathErr("move", dclean, err)
	}
	defer unix.Close(dpfd)
	var st unix.Stat_t
	if err := unix.Fstatat(spfd, sname, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return PathErr("move", sclean, err)
	}
	var flags uint
	if noReplace {
		flags = unix.RENAME_NOREPLACE
	}
	err = unix.Renameat2(spfd, sname, dpfd, dname, flags)
	switch err {
	case nil:
		return nil
	case unix.EXDEV:
		return errdefs.Invalid("move %s to %s: they are on different filesystems (mounts)", sclean, dclean)
	case unix.EINVAL:
		return errdefs.Invalid("move %s to %s: cannot move a directory under itself", sclean, dclean)
	case unix.ENOTDIR:
		// The source exists (checked above): dst is a non-directory
		// that a directory cannot replace, or a parent went away.
		if IsDir(st.Mode) {
			var dst unix.Stat_t
			if unix.Fstatat(dpfd, dname, &dst, unix.AT_SYMLINK_NOFOLLOW) == nil && !IsDir(dst.Mode) {
				return errdefs.Conflict("move %s to %s: cannot replace a non-directory with a directory", sclean, dclean)
			}
		}
	case unix.EEXIST:
		return errdefs.Conflict("move %s to %s: destination exists", sclean, dclean)
	case unix.ENOTEMPTY:
		return errdefs.Conflict("move %s to %s: destination is a non-empty directory", sclean, dclean)
	case unix.EISDIR:
		return errdefs.Conflict("move %s to %s: cannot replace a directory with a non-directory", sclean, dclean)
	}
	return PathErr("move", sclean+" to "+dclean, err)
}
