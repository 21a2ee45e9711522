package rootfs

import (
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
)

// UserXattrs reads the user-namespace extended attributes of the file a
// procfs path names (/proc/self/fd/N of an fd already resolved inside the
// root, or that and one plain name; follow says whether a link in the
// last component is followed, which only the fd's own magic link may
// be). Only regular files and directories are read; what does not fit in
// wire.MaxXattrs and wire.MaxXattrBytes is left out, names in order. A
// file system without xattrs, or any error, reports none: the report is
// best effort and never fails a stat or a list.
func UserXattrs(p string, follow bool) map[string]string {
	list, get := unix.Llistxattr, unix.Lgetxattr
	if follow {
		list, get = unix.Listxattr, unix.Getxattr
	}
	buf := make([]byte, 4096)
	n, err := list(p, buf)
	if err == unix.ERANGE {
		buf = make([]byte, 64<<10) // XATTR_LIST_MAX
		n, err = list(p, buf)
	}
	if err != nil || n <= 0 {
		return nil
	}
	var names []string
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if strings.HasPrefix(name, wire.XattrPrefix) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var out map[string]string
	total := 0
	val := make([]byte, wire.MaxXattrBytes)
	for _, name := range names {
		if len(out) == wire.MaxXattrs {
			break
		}
		m, err := get(p, name, val)
		if err != nil || total+len(name)+m > wire.MaxXattrBytes {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = string(val[:m])
		total += len(name) + m
	}
	return out
}

// FDPath is the procfs path of fd, and of name in the directory fd when
// name is not empty.
func FDPath(fd int, name string) string {
	p := "/proc/self/fd/" + strconv.Itoa(fd)
	if name != "" {
		p += "/" + name
	}
	return p
}

// CheckXattrs validates xattrs a write asks to set: user-namespace names
// of at most 255 bytes with no NUL, within wire.MaxXattrs and
// wire.MaxXattrBytes together.
func CheckXattrs(x map[string]string) error {
	if len(x) > wire.MaxXattrs {
		return errdefs.Invalid("more than %d xattrs", wire.MaxXattrs)
	}
	total := 0
	for k, v := range x {
		if !strings.HasPrefix(k, wire.XattrPrefix) || len(k) == len(wire.XattrPrefix) || len(k) > 255 || strings.ContainsRune(k, 0) {
			return errdefs.Invalid("xattr name %q: want user.NAME of at most 255 bytes", k)
		}
		total += len(k) + len(v)
	}
	if total > wire.MaxXattrBytes {
		return errdefs.Invalid("xattrs over %d bytes", wire.MaxXattrBytes)
	}
	return nil
}

// SetXattrs sets x on the open file fd.
func SetXattrs(fd int, clean string, x map[string]string) error {
	for k, v := range x {
		if err := unix.Fsetxattr(fd, k, []byte(v), 0); err != nil {
			return PathErr("setxattr", clean, err)
		}
	}
	return nil
}
