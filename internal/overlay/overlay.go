// Package overlay mounts and unmounts the overlayfs root filesystems of
// sandboxes (read-only template layers below, a per-sandbox upper dir on
// top) and lists the mounts under a directory, so that teardown can verify
// that nothing is left and the reconciler can find orphans.
package overlay

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Mount mounts an overlay at target with lowers (top first), upper and
// work. upper and work must be on the same filesystem.
func Mount(lowers []string, upper, work, target string) error {
	if len(lowers) == 0 {
		return errors.New("overlay: no lower layers")
	}
	for _, l := range lowers {
		if strings.ContainsAny(l, ",:") {
			return fmt.Errorf("overlay: lower path %q contains a separator", l)
		}
	}
	// Every layer is named by a descriptor (/proc/self/fd/N), not by its
	// path: the kernel shows the options as given in the mount table,
	// which the sandbox can read (/proc/self/mountinfo), and host paths
	// are none of its business. The descriptors only need to live until
	// mount returns. It also keeps the options short for many layers.
	dirs := append(append([]string(nil), lowers...), upper, work)
	names := make([]string, len(dirs))
	for i, d := range dirs {
		fd, err := unix.Open(d, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("overlay: open %s: %w", d, err)
		}
		defer unix.Close(fd)
		names[i] = fmt.Sprintf("/proc/self/fd/%d", fd)
	}
	n := len(lowers)
	// redirect_dir and metacopy stay off: layers carry no such xattrs, and
	// they would let an upper dir point at data outside itself.
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,redirect_dir=off,metacopy=off",
		strings.Join(names[:n], ":"), names[n], names[n+1])
	if len(opts) >= os.Getpagesize() {
		return fmt.Errorf("overlay: %d layers make the mount options longer than a page", len(lowers))
	}
	if err := unix.Mount("overlay", target, "overlay", unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("overlay: mount %s: %w", target, err)
	}
	return nil
}

// Unmount unmounts target; a target that is not mounted (or does not
// exist) is not an error. A busy mount is retried briefly, then detached.
func Unmount(target string) error {
	var err error
	for i := 0; i < 20; i++ {
		err = unix.Unmount(target, 0)
		switch {
		case err == nil:
			continue // stacked mounts: unmount until none is left
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.EBUSY):
			time.Sleep(time.Duration(i+1) * 5 * time.Millisecond)
		default:
			return fmt.Errorf("unmount %s: %w", target, err)
		}
	}
	if err := unix.Unmount(target, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmount %s (detach): %w", target, err)
	}
	return nil
}

// MountsUnder returns the mount points at or below dir, deepest last, from
// /proc/self/mountinfo.
func MountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dir = strings.TrimSuffix(dir, "/")
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescape(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, sc.Err()
}

// Mounted reports whether path is a mount point. It asks the kernel about
// path alone (statx's STATX_ATTR_MOUNT_ROOT, Linux 5.8+; the last element
// is not followed), so its cost does not grow with the host's mount table:
// it runs for every sandbox on each API read and reconciler pass, and a
// host with hundreds of sandboxes has thousands of mounts. A kernel
// without the attribute, or a path statx cannot answer for, is looked up
// in /proc/self/mountinfo.
func Mounted(path string) (bool, error) {
	var stx unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT|unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE, &stx)
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
		return false, nil
	case err == nil && stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0:
		return stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
	}
	return mountedInTable(path)
}

// mountedInTable is Mounted from the mount table.
func mountedInTable(path string) (bool, error) {
	ms, err := MountsUnder(path)
	if err != nil {
		return false, err
	}
	for _, m := range ms {
		if m == strings.TrimSuffix(path, "/") {
			return true, nil
		}
	}
	return false, nil
}

// unescape decodes the octal escapes (\040 etc.) mountinfo uses.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
