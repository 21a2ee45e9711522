// Package idmap makes the user namespaces and idmapped mounts that give
// every sandbox its own host uid/gid range while image layers, writable
// layers and volumes stay stored, shared and cloned, in one canonical
// range on disk.
//
// It is written by hand over golang.org/x/sys/unix because the pieces it
// needs are not in any library berth could take: the mount API calls
// (open_tree, mount_setattr with MOUNT_ATTR_IDMAP, move_mount) have no
// wrapper beyond the raw syscalls, and a user namespace owned by an
// arbitrary host uid cannot be made from a Go process at all — unshare
// (CLONE_NEWUSER) needs a single-threaded caller, and os/exec's
// Cloneflags clone the namespace before the child drops to
// SysProcAttr.Credential, so the namespace would be owned by host root.
// Owner matters: the kernel charges per-user counts (inotify instances,
// user namespaces) at every level of the user-namespace tree, in the
// parent to the namespace's owner, so a sandbox whose namespace host root
// owns spends host root's quota. NewUserns therefore runs util-linux's
// unshare(1) as the owner (it is single-threaded and drops nothing but
// into the new namespace), and writes the maps from the daemon, which
// holds CAP_SETUID and CAP_SETGID in the initial namespace and so may map
// any range.
package idmap

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Mapping maps Size ids from Inside (in the namespace) to Outside (in its
// parent, the host), as a line of /proc/PID/uid_map does.
type Mapping struct {
	Inside, Outside, Size uint32
}

func (m Mapping) String() string { return fmt.Sprintf("%d %d %d", m.Inside, m.Outside, m.Size) }

// unshareBin is util-linux's unshare(1), looked up once.
var unshareBin = sync.OnceValues(func() (string, error) { return exec.LookPath("unshare") })

// NewUserns returns an open descriptor of a new user namespace whose uid
// and gid maps are maps and which host uid/gid owner owns (0: host root).
// The process that made it is gone when NewUserns returns: the
// descriptor (or a bind mount of it, see BindNS) is what keeps the
// namespace alive.
func NewUserns(maps []Mapping, owner uint32) (*os.File, error) {
	bin, err := unshareBin()
	if err != nil {
		return nil, fmt.Errorf("idmap: user namespaces need util-linux unshare: %w", err)
	}
	// unshare --user then exec cat: a byte written to cat coming back
	// proves the namespace exists (cat runs in it) before it is opened.
	cmd := exec.Command(bin, "--user", "--", "cat")
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if owner != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: owner, Gid: owner}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("idmap: starting unshare: %w", err)
	}
	done := false
	defer func() {
		stdin.Close()
		if !done {
			cmd.Process.Kill()
		}
		cmd.Wait()
	}()
	var b [1]byte
	if _, err := stdin.Write([]byte{'x'}); err != nil {
		return nil, fmt.Errorf("idmap: unshare --user: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	if _, err := io.ReadFull(stdout, b[:]); err != nil {
		stdin.Close()
		cmd.Wait()
		return nil, fmt.Errorf("idmap: unshare --user failed: %s", strings.TrimSpace(stderr.String()))
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	var lines strings.Builder
	for _, m := range maps {
		lines.WriteString(m.String() + "\n")
	}
	for _, f := range []string{"uid_map", "gid_map"} {
		if err := os.WriteFile(filepath.Join("/proc", pid, f), []byte(lines.String()), 0); err != nil {
			return nil, fmt.Errorf("idmap: writing %s: %w", f, err)
		}
	}
	ns, err := os.Open(filepath.Join("/proc", pid, "ns", "user"))
	if err != nil {
		return nil, err
	}
	done = true
	return ns, nil
}

// MountMaps returns the maps of a user namespace for idmapped mounts that
// show files stored in m.Inside's range as m.Outside's. Host root is mapped
// to itself besides: overlayfs makes its work directory, and copies files
// up, as the mounter (host root), through the upper layer's mount.
func MountMaps(m Mapping) []Mapping {
	return []Mapping{{Inside: 0, Outside: 0, Size: 1}, m}
}

// MountIdmapped mounts a clone of the mount tree at src on dst (which must
// exist) with ids shifted through the user namespace userns: a file stored
// with id i shows as the id i maps to outside userns (Mapping.Inside →
// Mapping.Outside), and files written through it are stored with the
// inverse.
func MountIdmapped(src, dst string, userns *os.File) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("idmap: open_tree %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns.Fd())}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("idmap: mount_setattr(MOUNT_ATTR_IDMAP) %s: %w", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("idmap: move_mount to %s: %w", dst, err)
	}
	return nil
}

// BindNS bind-mounts the namespace ns onto the file target (created if
// missing), so that the namespace outlives every process and descriptor,
// and can be joined by path (runc's namespaces[].path).
func BindNS(ns *os.File, target string) error {
	f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o400)
	if err != nil {
		return err
	}
	f.Close()
	src := fmt.Sprintf("/proc/self/fd/%d", ns.Fd())
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("idmap: binding user namespace to %s: %w", target, err)
	}
	return nil
}

// Owner returns the host uid that owns the user namespace ns.
func Owner(ns *os.File) (uint32, error) {
	var uid uint32
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, ns.Fd(), unix.NS_GET_OWNER_UID, uintptr(unsafe.Pointer(&uid))); e != 0 {
		return 0, e
	}
	return uid, nil
}

// Probe reports whether this kernel and the filesystem of dir support
// what per-sandbox ranges need: a user namespace owned by owner (0: host
// root), an idmapped mount of a directory of dir, and an overlay whose
// lower, upper and work dirs are all idmapped. It leaves nothing behind.
func Probe(dir string, m Mapping, owner uint32) (err error) {
	ns, err := NewUserns(MountMaps(m), owner)
	if err != nil {
		return err
	}
	defer ns.Close()
	if got, err := Owner(ns); err != nil || got != owner {
		return fmt.Errorf("idmap: namespace owner is %d, not %d (%v)", got, owner, err)
	}
	tmp, err := os.MkdirTemp(dir, ".idmap-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	src, view, root := filepath.Join(tmp, "src"), filepath.Join(tmp, "view"), filepath.Join(tmp, "root")
	for _, d := range []string{src + "/lower", src + "/upper", src + "/work", view, root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(src+"/lower/f", nil, 0o644); err != nil {
		return err
	}
	if err := os.Lchown(src+"/lower/f", int(m.Inside), int(m.Inside)); err != nil {
		return err
	}
	if err := MountIdmapped(src, view, ns); err != nil {
		return err
	}
	defer unix.Unmount(view, unix.MNT_DETACH)
	var st unix.Stat_t
	if err := unix.Stat(view+"/lower/f", &st); err != nil {
		return err
	}
	if st.Uid != m.Outside {
		return fmt.Errorf("idmap: a file stored as %d shows as %d through the idmapped mount, not %d", m.Inside, st.Uid, m.Outside)
	}
	opts := fmt.Sprintf("lowerdir=%s/lower,upperdir=%s/upper,workdir=%s/work", view, view, view)
	if err := unix.Mount("overlay", root, "overlay", 0, opts); err != nil {
		return fmt.Errorf("idmap: overlay over idmapped layers: %w", err)
	}
	defer unix.Unmount(root, unix.MNT_DETACH)
	if err := os.WriteFile(root+"/g", nil, 0o644); err != nil {
		return err
	}
	if err := os.Lchown(root+"/g", int(m.Outside)+1, int(m.Outside)+1); err != nil {
		return fmt.Errorf("idmap: chown through the overlay: %w", err)
	}
	if err := unix.Lstat(src+"/upper/g", &st); err != nil {
		return err
	}
	if st.Uid != m.Inside+1 {
		return fmt.Errorf("idmap: a file owned by %d through the overlay is stored as %d, not %d", m.Outside+1, st.Uid, m.Inside+1)
	}
	return nil
}
