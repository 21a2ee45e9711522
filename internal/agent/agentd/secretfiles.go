package agentd

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/internal/agent/rootfs"
	"github.com/berth-sh/berth/internal/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
	"golang.org/x/sys/unix"
)

// resolveSecret is how every path under the secrets tmpfs is resolved:
// below the directory fd, no symlink (nor magic link) anywhere.
const resolveSecret = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// Bounds of the walk that prunes the tmpfs (the sandbox's root may have
// put anything there).
const (
	maxSecretDepth   = 16
	maxSecretEntries = 4096
	maxShredBytes    = 4 << 20
)

// handleSecretFiles serves OpSecretFiles: one data frame holding a JSON
// wire.SecretFiles, then the sync, then an end frame.
func (s *server) handleSecretFiles(cn *conn) error {
	cn.c.SetReadDeadline(time.Now().Add(headerTimeout))
	t, p, err := cn.fr.Next()
	if err != nil {
		return wire.ProtocolErrorf("secret files: %v", err)
	}
	if t != wire.FrameData {
		return errdefs.Invalid("secret files: want a data frame, got %s", t)
	}
	sf, rels, err := wire.DecodeSecretFiles(p)
	clear(p)
	if err != nil {
		return err
	}
	defer func() {
		for i := range sf.Files {
			clear(sf.Files[i].Data)
		}
	}()
	if len(sf.EgressCA) == 0 && len(sf.SystemCA) > 0 {
		return errdefs.Invalid("secret files: a system CA bundle without an egress CA")
	}
	cn.c.SetReadDeadline(time.Time{})
	uid, gid := 0, 0
	if cred, err := s.root.ResolveUser(cn.req.Owner); err != nil {
		return err
	} else if cred != nil {
		uid, gid = int(cred.Uid), int(cred.Gid)
	}
	dfd, err := openSecretDir(s.root)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	var system []byte
	if len(sf.EgressCA) > 0 {
		if system = systemCABundle(s.root); len(system) == 0 {
			system = sf.SystemCA
		}
	}
	if err := syncSecretFiles(dfd, sf, rels, uid, gid, system); err != nil {
		return err
	}
	return cn.fw.Send(wire.FrameEnd, nil)
}

// openSecretDir opens the root's /run/secrets with no symlink followed and
// refuses it unless it is a tmpfs: a secret is never written to the
// writable layer, whatever the sandbox did to /run.
func openSecretDir(root *rootfs.Root) (int, error) {
	rel := strings.TrimPrefix(wire.SecretDir, "/")
	fd, err := rootfs.Openat2(root.FD(), rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, rootfs.ResolveInRoot|unix.RESOLVE_NO_SYMLINKS)
	if err != nil {
		return -1, rootfs.PathErr("open", wire.SecretDir, err)
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		unix.Close(fd)
		return -1, rootfs.PathErr("statfs", wire.SecretDir, err)
	}
	if sfs.Type != unix.TMPFS_MAGIC {
		unix.Close(fd)
		return -1, errdefs.Conflict("%s is not a tmpfs: no secret is written there", wire.SecretDir)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, rootfs.PathErr("stat", wire.SecretDir, err)
	}
	secretsDev.Store(st.Dev)
	return fd, nil
}

// secretsDev is the device of the secrets tmpfs once the agent has
// written to it: archives (export, cp out) leave its contents out.
var secretsDev atomic.Uint64

// isSecretsTmpfs reports whether the open directory fd is on the secrets
// tmpfs.
func isSecretsTmpfs(fd int) bool {
	d := secretsDev.Load()
	if d == 0 {
		return false
	}
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Dev == d
}

// syncSecretFiles makes the directory dfd hold exactly sf's files (rels
// are their paths relative to it, from wire.DecodeSecretFiles): every
// other entry is removed, regular files overwritten with zeros first;
// then each file is written to a fresh temporary file 0400 owned by
// uid:gid and renamed over its path. Nothing is resolved through a
// symlink; a missing directory is made 0755 (root's).
func syncSecretFiles(dfd int, sf wire.SecretFiles, rels []string, uid, gid int, system []byte) error {
	wantFile := map[string]bool{}
	bundle := strings.TrimPrefix(wire.EgressCABundle, wire.SecretDir+"/")
	if len(sf.EgressCA) > 0 {
		wantFile[bundle] = true
	}
	wantDir := map[string]bool{}
	for _, r := range rels {
		wantFile[r] = true
		for d := r; ; {
			i := strings.LastIndexByte(d, '/')
			if i < 0 {
				break
			}
			d = d[:i]
			wantDir[d] = true
		}
	}
	n := 0
	if err := pruneSecrets(dfd, "", wantFile, wantDir, 0, &n); err != nil {
		return err
	}
	for i, f := range sf.Files {
		if err := writeSecret(dfd, rels[i], f.Data, uid, gid, 0o400); err != nil {
			return err
		}
	}
	if len(sf.EgressCA) > 0 {
		// Not a secret: readable by every user of the sandbox.
		data := append(append(append([]byte{}, system...), '\n'), sf.EgressCA...)
		if err := writeSecret(dfd, bundle, data, 0, 0, 0o444); err != nil {
			return err
		}
	}
	return nil
}

// systemCABundle reads the image's own CA bundle (the first of
// wire.SystemCABundles that is a regular file, resolved inside the root),
// at most wire.MaxSystemCABytes; an image without one gives none.
func systemCABundle(root *rootfs.Root) []byte {
	for _, p := range wire.SystemCABundles {
		b, err := root.ReadSmallFile(p, wire.MaxSystemCABytes)
		if err == nil && len(b) > 0 {
			return b
		}
	}
	return nil
}

func pruneSecrets(fd int, prefix string, wantFile, wantDir map[string]bool, depth int, n *int) error {
	if depth > maxSecretDepth {
		return errdefs.Invalid("%s: deeper than %d directories", wire.SecretDir, maxSecretDepth)
	}
	names, err := rootfs.ReadDirNames(fd, maxSecretEntries)
	if err != nil {
		return rootfs.PathErr("list", wire.SecretDir+"/"+prefix, err)
	}
	for _, name := range names {
		if *n++; *n > maxSecretEntries {
			return errdefs.TooLarge("%s: more than %d entries", wire.SecretDir, maxSecretEntries)
		}
		rel := prefix + name
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if err == unix.ENOENT {
				continue
			}
			return rootfs.PathErr("stat", wire.SecretDir+"/"+rel, err)
		}
		switch {
		case rootfs.IsDir(st.Mode) && wantDir[rel]:
			sub, err := rootfs.Openat2(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, resolveSecret)
			if err != nil {
				return rootfs.PathErr("open", wire.SecretDir+"/"+rel, err)
			}
			err = pruneSecrets(sub, rel+"/", wantFile, wantDir, depth+1, n)
			unix.Close(sub)
			if err != nil {
				return err
			}
		case rootfs.IsReg(st.Mode) && wantFile[rel]:
			// replaced by the rename of the new value
		default:
			if err := removeSecret(fd, name, &st, depth, n); err != nil {
				return rootfs.PathErr("remove", wire.SecretDir+"/"+rel, err)
			}
		}
	}
	return nil
}

// removeSecret removes entry name of fd (stat st): a regular file after
// overwriting it with zeros (its other hard links see zeros too), a
// directory with its contents.
func removeSecret(fd int, name string, st *unix.Stat_t, depth int, n *int) error {
	switch {
	case rootfs.IsReg(st.Mode):
		shred(fd, name)
		return unix.Unlinkat(fd, name, 0)
	case rootfs.IsDir(st.Mode):
		if depth >= maxSecretDepth {
			return unix.ELOOP
		}
		sub, err := rootfs.Openat2(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, resolveSecret)
		if err != nil {
			return err
		}
		names, err := rootfs.ReadDirNames(sub, maxSecretEntries)
		if err != nil {
			unix.Close(sub)
			return err
		}
		for _, c := range names {
			if *n++; *n > maxSecretEntries {
				unix.Close(sub)
				return unix.E2BIG
			}
			var cst unix.Stat_t
			if err := unix.Fstatat(sub, c, &cst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if err == unix.ENOENT {
					continue
				}
				unix.Close(sub)
				return err
			}
			if err := removeSecret(sub, c, &cst, depth+1, n); err != nil {
				unix.Close(sub)
				return err
			}
		}
		unix.Close(sub)
		return unix.Unlinkat(fd, name, unix.AT_REMOVEDIR)
	default:
		return unix.Unlinkat(fd, name, 0)
	}
}

// shred overwrites the regular file name of fd with zeros, best effort.
func shred(fd int, name string) {
	f, err := rootfs.Openat2(fd, name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0, resolveSecret)
	if err != nil {
		return
	}
	defer unix.Close(f)
	var st unix.Stat_t
	if unix.Fstat(f, &st) != nil || !rootfs.IsReg(st.Mode) {
		return
	}
	zero := make([]byte, 32<<10)
	for left := min(st.Size, maxShredBytes); left > 0; {
		k, err := unix.Write(f, zero[:min(left, int64(len(zero)))])
		if err != nil || k <= 0 {
			return
		}
		left -= int64(k)
	}
	unix.Fsync(f)
}

// writeSecret writes data as rel (relative to dfd), of mode owned by
// uid:gid, by a temporary file renamed over it.
func writeSecret(dfd int, rel string, data []byte, uid, gid int, mode uint32) error {
	dir, name := "", rel
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		dir, name = rel[:i], rel[i+1:]
	}
	pfd, err := secretParent(dfd, dir)
	if err != nil {
		return rootfs.PathErr("make", wire.SecretDir+"/"+dir, err)
	}
	defer unix.Close(pfd)
	tmp := ".berth-new-" + name
	if len(tmp) > 255 {
		tmp = tmp[:255]
	}
	if err := unix.Unlinkat(pfd, tmp, 0); err != nil && err != unix.ENOENT {
		return rootfs.PathErr("remove", wire.SecretDir+"/"+tmp, err)
	}
	f, err := rootfs.Openat2(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o400, resolveSecret)
	if err != nil {
		return rootfs.PathErr("create", wire.SecretDir+"/"+rel, err)
	}
	err = func() error {
		defer unix.Close(f)
		if err := unix.Fchown(f, uid, gid); err != nil {
			return err
		}
		if err := unix.Fchmod(f, mode); err != nil {
			return err
		}
		for b := data; len(b) > 0; {
			k, err := unix.Write(f, b)
			if err != nil {
				return err
			}
			b = b[k:]
		}
		return nil
	}()
	if err == nil {
		err = unix.Renameat(pfd, tmp, pfd, name)
	}
	if err != nil {
		unix.Unlinkat(pfd, tmp, 0)
		return rootfs.PathErr("write", wire.SecretDir+"/"+rel, err)
	}
	return nil
}

// secretParent opens (making it if missing, 0755) directory dir below
// dfd, component by component with no symlink followed.
func secretParent(dfd int, dir string) (int, error) {
	fd, err := unix.Dup(dfd)
	if err != nil {
		return -1, err
	}
	if dir == "" {
		return fd, nil
	}
	for _, c := range strings.Split(dir, "/") {
		if err := unix.Mkdirat(fd, c, 0o755); err != nil && err != unix.EEXIST {
			unix.Close(fd)
			return -1, err
		}
		next, err := rootfs.Openat2(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, resolveSecret)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}
