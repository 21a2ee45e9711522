package rootfs

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/agent/wire"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Root confines file operations to one directory. Every path is resolved
// by the kernel with Openat2(RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS), which
// treats the root fd as "/" for "..", absolute paths and absolute symlink
// targets alike, and refuses /proc magic links; everything after the
// resolution is fd-relative, so no path is ever looked up twice.
type Root struct {
	fd int // O_PATH|O_DIRECTORY
}

func OpenRoot(dir string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open root %s: %w", dir, err)
	}
	return &Root{fd: fd}, nil
}

func (r *Root) Close() error { return unix.Close(r.fd) }

// FD is the root's directory descriptor, for openat2 with other resolve
// flags than Open's.
func (r *Root) FD() int { return r.fd }

const ResolveInRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// CleanPath validates a sandbox path and returns it cleaned ("/a/b") and
// relative to the root ("a/b", or "." for the root itself).
func CleanPath(p string) (clean, rel string, err error) {
	switch {
	case p == "":
		return "", "", errdefs.Invalid("empty path")
	case len(p) > wire.MaxPathBytes:
		return "", "", errdefs.Invalid("path longer than %d bytes", wire.MaxPathBytes)
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

// Openat2 retries the EAGAIN that RESOLVE_IN_ROOT|BENEATH return when a
// rename raced with the lookup.
func Openat2(dirfd int, p string, flags uint64, mode uint64, resolve uint64) (int, error) {
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

// Open resolves a validated relative path inside the root.
func (r *Root) Open(rel string, flags uint64) (int, error) {
	return Openat2(r.fd, rel, flags, 0, ResolveInRoot)
}

// OpenParent resolves the parent directory of a cleaned path and returns
// an O_PATH fd on it with the last component. The last component is
// never followed by the callers.
func (r *Root) OpenParent(clean string) (int, string, error) {
	dir, name := path.Split(clean)
	rel := strings.TrimPrefix(path.Clean(dir), "/")
	if rel == "" {
		rel = "."
	}
	fd, err := r.Open(rel, unix.O_PATH|unix.O_DIRECTORY)
	return fd, name, err
}

// PathErr turns an errno from an operation on a sandbox path into an
// error of the matching category. Messages name the sandbox path only,
// never the host path of the root.
func PathErr(op, p string, err error) error {
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

func Info(p string, st *unix.Stat_t, link string) wire.FileInfo {
	name := path.Base(p)
	uid, gid := st.Uid, st.Gid
	return wire.FileInfo{
		Name:    name,
		Path:    p,
		Size:    st.Size,
		Mode:    uint32(fileMode(st.Mode)),
		ModTime: time.Unix(st.Mtim.Unix()).UTC(),
		IsDir:   st.Mode&unix.S_IFMT == unix.S_IFDIR,
		Link:    link,
		UID:     &uid,
		GID:     &gid,
	}
}

// ReadlinkAt reads a symlink relative to dirfd; name "" reads the link an
// O_PATH fd refers to.
func ReadlinkAt(dirfd int, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) >= wire.MaxPathBytes*2 {
			return "", unix.ENAMETOOLONG
		}
		buf = make([]byte, len(buf)*4)
	}
}

func IsDir(m uint32) bool  { return m&unix.S_IFMT == unix.S_IFDIR }
func IsReg(m uint32) bool  { return m&unix.S_IFMT == unix.S_IFREG }
func IsLink(m uint32) bool { return m&unix.S_IFMT == unix.S_IFLNK }

// Stat is lstat inside the root: a symlink in the last component is
// described, not followed.
func (r *Root) Stat(p string) (wire.FileInfo, error) {
	clean, rel, err := CleanPath(p)
	if err != nil {
		return wire.FileInfo{}, err
	}
	fd, err := r.Open(rel, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return wire.FileInfo{}, PathErr("stat", clean, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return wire.FileInfo{}, PathErr("stat", clean, err)
	}
	var link string
	if IsLink(st.Mode) {
		if link, err = ReadlinkAt(fd, ""); err != nil {
			return wire.FileInfo{}, PathErr("readlink", clean, err)
		}
	}
	fi := Info(clean, &st, link)
	if IsReg(st.Mode) || IsDir(st.Mode) {
		// The O_PATH fd's magic link leads to the file itself.
		fi.Xattrs = UserXattrs(FDPath(fd, ""), true)
	}
	return fi, nil
}

// ReadDirNames returns the names of the directory fd (which must be open
// for reading), without "." and "..", up to limit names.
func ReadDirNames(fd int, limit int) ([]string, error) {
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

// List returns the entries of a directory (a symlink to a directory in the
// last component is followed, inside the root).
func (r *Root) List(p string, each func(wire.FileInfo) error) error {
	clean, rel, err := CleanPath(p)
	if err != nil {
		return err
	}
	fd, err := r.Open(rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return PathErr("list", clean, err)
	}
	defer unix.Close(fd)
	names, err := ReadDirNames(fd, wire.MaxListEntries)
	if err != nil {
		return PathErr("list", clean, err)
	}
	slices.Sort(names)
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if err == unix.ENOENT { // removed while we listed
				continue
			}
			return PathErr("stat", path.Join(clean, name), err)
		}
		var link string
		if IsLink(st.Mode) {
			link, _ = ReadlinkAt(fd, name)
		}
		fi := Info(path.Join(clean, name), &st, link)
		if IsReg(st.Mode) || IsDir(st.Mode) {
			// name is one component, not followed.
			fi.Xattrs = UserXattrs(FDPath(fd, name), false)
		}
		if err := each(fi); err != nil {
			return err
		}
	}
	return nil
}

// Mkdir creates a directory; with parents, missing parents too and an
// existing directory is not an error.
func (r *Root) Mkdir(p string, mode uint32, parents bool) error {
	_, err := r.MkdirCreated(p, mode, parents)
	return err
}

// MkdirCreated is Mkdir that also says which directories it made, in the
// order it made them (absolute paths inside the root): what an owned
// mkdir gives to its owner besides the target.
func (r *Root) MkdirCreated(p string, mode uint32, parents bool) (created []string, err error) {
	clean, rel, err := CleanPath(p)
	if err != nil {
		return nil, err
	}
	if mode == 0 {
		mode = 0o755
	}
	mode &= 0o7777
	if !parents {
		if rel == "." {
			return nil, errdefs.Conflict("mkdir /: file exists")
		}
		pfd, name, err := r.OpenParent(clean)
		if err != nil {
			return nil, PathErr("mkdir", clean, err)
		}
		defer unix.Close(pfd)
		if err := unix.Mkdirat(pfd, name, mode); err != nil {
			return nil, PathErr("mkdir", clean, err)
		}
		return []string{clean}, nil
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
		fd, err := r.Open(prefix, unix.O_PATH|unix.O_DIRECTORY)
		if err == nil {
			unix.Close(fd)
			continue
		}
		if err != unix.ENOENT {
			return created, PathErr("mkdir", "/"+prefix, err)
		}
		pfd, name, err := r.OpenParent("/" + prefix)
		if err != nil {
			return created, PathErr("mkdir", "/"+prefix, err)
		}
		err = unix.Mkdirat(pfd, name, mode)
		unix.Close(pfd)
		if err != nil && err != unix.EEXIST {
			return created, PathErr("mkdir", "/"+prefix, err)
		}
		if err == nil {
			created = append(created, "/"+prefix)
		}
	}
	fd, err := r.Open(rel, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return created, PathErr("mkdir", clean, err)
	}
	return created, unix.Close(fd)
}

// MaxTreeDepth bounds the recursion of tree walks (one fd per level).
const MaxTreeDepth = 512

// Remove deletes a file, a symlink (never its target) or a directory.
func (r *Root) Remove(p string, recursive bool) error {
	clean, rel, err := CleanPath(p)
	if err != nil {
		return err
	}
	if rel == "." {
		return errdefs.Invalid("refusing to remove /")
	}
	pfd, name, err := r.OpenParent(clean)
	if err != nil {
		return PathErr("remove", clean, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return PathErr("remove", clean, err)
	}
	if !IsDir(st.Mode) {
		return PathErr("remove", clean, unix.Unlinkat(pfd, name, 0))
	}
	if !recursive {
		return PathErr("remove", clean, unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR))
	}
	return PathErr("remove", clean, removeAllAt(pfd, name, 0))
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
	if depth >= MaxTreeDepth {
		return errdefs.TooLarge("directory tree deeper than %d levels", MaxTreeDepth)
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
		names, rerr := ReadDirNames(fd, 1<<20)
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
