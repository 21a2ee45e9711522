package image

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// resolveFlags confine every lookup below a layer directory and refuse to
// traverse any symlink, including ones the archive itself created earlier.
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openBeneath opens rel (a cleaned, relative, slash-separated path; "." for
// dirfd itself) below dirfd without following symlinks in any component.
func openBeneath(dirfd int, rel string, flags int) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW), Resolve: resolveFlags}
	for {
		fd, err := unix.Openat2(dirfd, rel, how)
		if err == unix.EINTR || err == unix.EAGAIN {
			// EAGAIN: a concurrent rename raced the lookup; retry.
			continue
		}
		return fd, err
	}
}

// openDirBeneath opens directory rel below dirfd for reading (fd usable
// for fchown/fchmod/fsetxattr), never following symlinks.
func openDirBeneath(dirfd int, rel string) (int, error) {
	return openBeneath(dirfd, rel, unix.O_RDONLY|unix.O_DIRECTORY)
}

// mkdirAllBeneath returns an fd for directory rel below rootfd, creating
// missing components with mode 0755 owned by uid/gid. An existing component
// that is not a directory (a symlink included) is an error: it is never
// followed or replaced implicitly.
func mkdirAllBeneath(rootfd int, rel string, uid, gid int) (int, error) {
	if rel == "." || rel == "" {
		return unix.Dup(rootfd)
	}
	fd, err := openDirBeneath(rootfd, rel)
	if err == nil {
		return fd, nil
	}
	if !errors.Is(err, unix.ENOENT) {
		return -1, err
	}
	cur, err := unix.Dup(rootfd)
	if err != nil {
		return -1, err
	}
	for _, comp := range strings.Split(rel, "/") {
		next, err := openDirBeneath(cur, comp)
		if errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(cur, comp, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(cur)
				return -1, err
			}
			if err = unix.Fchownat(cur, comp, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				unix.Close(cur)
				return -1, err
			}
			next, err = openDirBeneath(cur, comp)
		}
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}

// removeAllAt removes name in dirfd recursively without following symlinks.
func removeAllAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
		return err
	}
	fd, err := openDirBeneath(dirfd, name)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	for {
		names, rerr := f.Readdirnames(256)
		for _, n := range names {
			if err := removeAllAt(fd, n); err != nil {
				f.Close()
				return err
			}
		}
		if rerr != nil || len(names) == 0 {
			break
		}
	}
	f.Close()
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

// cleanEntryPath validates an archive member name and returns it cleaned,
// relative and slash-separated ("." for the root itself). Absolute names and
// names that escape the root after cleaning are rejected.
func cleanEntryPath(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("empty name")
	}
	if strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("name contains NUL")
	}
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("absolute path %q", name)
	}
	p := path.Clean(name)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", fmt.Errorf("path %q escapes the layer root", name)
	}
	return p, nil
}
