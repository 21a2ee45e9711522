package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// fsRoot confines file operations to one directory. Every path is resolved
// by the kernel with openat2(RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS), which
// treats the root fd as "/" for "..", absolute paths and absolute symlink
// targets alike, and refuses /proc magic links; everything after the
// resolution is fd-relative, so no path is ever looked up twice.
type fsRoot struct {
	fd int // O_PATH|O_DIRECTORY
}

func openRoot(dir string) (*fsRoot, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open root %s: %w", dir, err)
	}
	return &fsRoot{fd: fd}, nil
}

func (r *fsRoot) close() error { return unix.Close(r.fd) }

const resolveInRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// cleanPath validates a sandbox path and returns it cleaned ("/a/b") and
// relative to the root ("a/b", or "." for the root itself).
func cleanPath(p string) (clean, rel string, err error) {
	switch {
	case p == "":
		return "", "", errdefs.Invalid("empty path")
	case len(p) > maxPathBytes:
		return "", "", errdefs.Invalid("path longer than %d bytes", maxPathBytes)
	case strings.IndexByte(p, 0) >= 0:
		return "", "", errdefs.Invalid("path contains a NUL byte")
	case p[0] != '/':
		return "", "", errdefs.Invalid("path %q is not absolute", p)
	}
	clean = path.Clean(p)
	rel = strings.TrimPrefix(clean, "/")
	if rel == "" {
		rel = "."
	}
	return clean, rel, nil
}

// openat2 retries the EAGAIN that RESOLVE_IN_ROOT|BENEATH return when a
// rename raced with the lookup.
func openat2(dirfd int, p string, flags uint64, mode uint64, resolve uint64) (int, error) {
	how := unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: mode, Resolve: resolve}
	for range 16 {
		fd, err := unix.Openat2(dirfd, p, &how)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		return fd, err
	}
	return -1, unix.EAGAIN
}

// open resolves a validated relative path inside the root.
func (r *fsRoot) open(rel string, flags uint64) (int, error) {
	return openat2(r.fd, rel, flags, 0, resolveInRoot)
}

// openParent resolves the parent directory of a cleaned path and returns
// an O_PATH fd on it with the last component. The last component is
// never followed by the callers.
func (r *fsRoot) openParent(clean string) (int, string, error) {
	dir, name := path.Split(clean)
	rel := strings.TrimPrefix(path.Clean(dir), "/")
	if rel == "" {
		rel = "."
	}
	fd, err := r.open(rel, unix.O_PATH|unix.O_DIRECTORY)
	return fd, name, err
}

// pathErr turns an errno from an operation on a sandbox path into an
// error of the matching category. Messages name the sandbox path only,
// never the host path of the root.
func pathErr(op, p string, err error) error {
	if err == nil {
		return nil
	}
	var de *errdefs.Error
	if errors.As(err, &de) {
		return err
	}
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return fmt.Errorf("%s %s: %w", op, p, err)
	}
	cat := errnoCategory(errno)
	msg := fmt.Sprintf("%s %s: %s", op, p, errnoText(errno))
	return &errdefs.Error{Category: cat, Msg: msg, Err: errno}
}

func errnoText(e unix.Errno) string {
	switch e {
	case unix.EXDEV:
		return "path escapes its directory"
	case unix.ELOOP:
		return "too many symlinks, a symlink where none is allowed, or a /proc magic link"
	}
	return e.Error()
}

func errnoCategory(e unix.Errno) error {
	switch e {
	case unix.ENOENT, unix.ENOTDIR:
		return errdefs.ErrNotFound
	case unix.EEXIST, unix.ENOTEMPTY, unix.EBUSY, unix.EISDIR, unix.ETXTBSY:
		return errdefs.ErrConflict
	case unix.EACCES, unix.EPERM, unix.EROFS:
		return errdefs.ErrPermission
	case unix.ELOOP, unix.EXDEV, unix.EINVAL, unix.ENAMETOOLONG, unix.ENOEXEC:
		return errdefs.ErrInvalid
	case unix.EFBIG, unix.ENOSPC, unix.EDQUOT, unix.E2BIG:
		return errdefs.ErrTooLarge
	}
	return errInternal
}

// errInternal is the category of errors with no better one (500).
var errInternal = errors.New("internal")

// fileMode converts a stat mode to Go's fs.FileMode bits.
func fileMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	}
	if m&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

func fileInfo(p string, st *unix.Stat_t, link string) FileInfo {
	name := path.Base(p)
	return FileInfo{
		Name:    name,
		Path:    p,
		Size:    st.Size,
		Mode:    uint32(fileMode(st.Mode)),
		ModTime: time.Unix(st.Mtim.Unix()).UTC(),
		IsDir:   st.Mode&unix.S_IFMT == unix.S_IFDIR,
		Link:    link,
	}
}

// readlinkAt reads a symlink relative to dirfd; name "" reads the link an
// O_PATH fd refers to.
func readlinkAt(dirfd int, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) >= maxPathBytes*2 {
			return "", unix.ENAMETOOLONG
		}
		buf = make([]byte, len(buf)*4)
	}
}

func isDirMode(m uint32) bool  { return m&unix.S_IFMT == unix.S_IFDIR }
func isRegMode(m uint32) bool  { return m&unix.S_IFMT == unix.S_IFREG }
func isLinkMode(m uint32) bool { return m&unix.S_IFMT == unix.S_IFLNK }

// stat is lstat inside the root: a symlink in the last component is
// described, not followed.
func (r *fsRoot) stat(p string) (FileInfo, error) {
	clean, rel, err := cleanPath(p)
	if err != nil {
		return FileInfo{}, err
	}
	fd, err := r.open(rel, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return FileInfo{}, pathErr("stat", clean, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return FileInfo{}, pathErr("stat", clean, err)
	}
	var link string
	if isLinkMode(st.Mode) {
		if link, err = readlinkAt(fd, ""); err != nil {
			return FileInfo{}, pathErr("readlink", clean, err)
		}
	}
	return fileInfo(clean, &st, link), nil
}

// readDirNames returns the names of the directory fd (which must be open
// for reading), without "." and "..", up to limit names.
func readDirNames(fd int, limit int) ([]string, error) {
	var names []string
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return names, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
		if len(names) > limit {
			return names, errdefs.TooLarge("directory has more than %d entries", limit)
		}
	}
}

// list returns the entries of a directory (a symlink to a directory in the
// last component is followed, inside the root).
func (r *fsRoot) list(p string, each func(FileInfo) error) error {
	clean, rel, err := cleanPath(p)
	if err != nil {
		return err
	}
	fd, err := r.open(rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return pathErr("list", clean, err)
	}
	defer unix.Close(fd)
	names, err := readDirNames(fd, maxListEntries)
	if err != nil {
		return pathErr("list", clean, err)
	}
	slices.Sort(names)
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if err == unix.ENOENT { // removed while we listed
				continue
			}
			return pathErr("stat", path.Join(clean, name), err)
		}
		var link string
		if isLinkMode(st.Mode) {
			link, _ = readlinkAt(fd, name)
		}
		if err := each(fileInfo(path.Join(clean, name), &st, link)); err != nil {
			return err
		}
	}
	return nil
}

// mkdir creates a directory; with parents, missing parents too and an
// existing directory is not an error.
func (r *fsRoot) mkdir(p string, mode uint32, parents bool) error {
	clean, rel, err := cleanPath(p)
	if err != nil {
		return err
	}
	if mode == 0 {
		mode = 0o755
	}
	mode &= 0o7777
	if !parents {
		if rel == "." {
			return errdefs.Conflict("mkdir /: file exists")
		}
		pfd, name, err := r.openParent(clean)
		if err != nil {
			return pathErr("mkdir", clean, err)
		}
		defer unix.Close(pfd)
		return pathErr("mkdir", clean, unix.Mkdirat(pfd, name, mode))
	}
	// Walk down from the root, resolving each prefix afresh inside the
	// root so that a symlinked component is followed the way the kernel
	// would follow it in the sandbox.
	parts := strings.Split(rel, "/")
	if rel == "." {
		parts = nil
	}
	for i := range parts {
		prefix := strings.Join(parts[:i+1], "/")
		fd, err := r.open(prefix, unix.O_PATH|unix.O_DIRECTORY)
		if err == nil {
			unix.Close(fd)
			continue
		}
		if err != unix.ENOENT {
			return pathErr("mkdir", "/"+prefix, err)
		}
		pfd, name, err := r.openParent("/" + prefix)
		if err != nil {
			return pathErr("mkdir", "/"+prefix, err)
		}
		err = unix.Mkdirat(pfd, name, mode)
		unix.Close(pfd)
		if err != nil && err != unix.EEXIST {
			return pathErr("mkdir", "/"+prefix, err)
		}
	}
	fd, err := r.open(rel, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return pathErr("mkdir", clean, err)
	}
	return unix.Close(fd)
}

// maxTreeDepth bounds the recursion of tree walks (one fd per level).
const maxTreeDepth = 512

// remove deletes a file, a symlink (never its target) or a directory.
func (r *fsRoot) remove(p string, recursive bool) error {
	clean, rel, err := cleanPath(p)
	if err != nil {
		return err
	}
	if rel == "." {
		return errdefs.Invalid("refusing to remove /")
	}
	pfd, name, err := r.openParent(clean)
	if err != nil {
		return pathErr("remove", clean, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return pathErr("remove", clean, err)
	}
	if !isDirMode(st.Mode) {
		return pathErr("remove", clean, unix.Unlinkat(pfd, name, 0))
	}
	if !recursive {
		return pathErr("remove", clean, unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR))
	}
	return pathErr("remove", clean, removeAllAt(pfd, name, 0))
}

// removeAllAt removes name under dirfd and everything below it, through
// fds opened with O_NOFOLLOW: a symlink is unlinked, never entered.
func removeAllAt(dirfd int, name string, depth int) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EISDIR && err != unix.EPERM {
		return err
	}
	if depth >= maxTreeDepth {
		return errdefs.TooLarge("directory tree deeper than %d levels", maxTreeDepth)
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return err
	}
	// A few passes: entries created while we delete are caught by the next
	// one; a writer that keeps creating them ends as ENOTEMPTY.
	for range 3 {
		names, rerr := readDirNames(fd, 1<<20)
		if rerr != nil {
			unix.Close(fd)
			return rerr
		}
		if len(names) == 0 {
			break
		}
		for _, n := range names {
			if err := removeAllAt(fd, n, depth+1); err != nil {
				unix.Close(fd)
				return err
			}
		}
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			unix.Close(fd)
			return err
		}
	}
	unix.Close(fd)
	err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
	if err == unix.ENOENT {
		return nil
	}
	return err
}
