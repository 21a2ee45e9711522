package agentd

import (
	"archive/tar"
	"errors"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/agent/rootfs"

	"github.com/berth-sh/berth/internal/agent/wire"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Caps of one WriteTar besides Config.MaxFileBytes (total file bytes).
const (
	maxTarEntries = 1 << 20
	// maxTarTrailer is how much after the archive's end marker is read
	// (tar pads archives to records of 10 KiB) before the upload is cut.
	maxTarTrailer = 1 << 20
)

// handleReadTar streams a tar archive of a file or a directory tree as data
// frames, then an end frame. Symlinks are archived as symlinks and never
// followed, not even in the last component of the requested path; FIFOs,
// sockets and devices are left out.
func (s *server) handleReadTar(cn *conn) error {
	clean, _, err := rootfs.CleanPath(cn.req.Path)
	if err != nil {
		return err
	}
	out, shifted := s.cfg.IDs.tarWriter(wire.DataWriter{FW: cn.fw})
	if err := s.writeTar(tar.NewWriter(out), clean); err != nil {
		if pw, ok := out.(*io.PipeWriter); ok {
			pw.CloseWithError(err)
		}
		shifted()
		return err
	}
	out.Close()
	if err := shifted(); err != nil {
		return err
	}
	return cn.fw.Send(wire.FrameEnd, nil)
}

// writeTar archives the cleaned path clean to tw and closes it.
func (s *server) writeTar(tw *tar.Writer, clean string) error {
	if clean == "/" {
		fd, err := s.root.Open(".", unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return rootfs.PathErr("open", clean, err)
		}
		err = tarDirEntries(tw, fd, "", 0)
		unix.Close(fd)
		if err != nil {
			return err
		}
	} else {
		pfd, name, err := s.root.OpenParent(clean)
		if err != nil {
			return rootfs.PathErr("open", clean, err)
		}
		var st unix.Stat_t
		if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			unix.Close(pfd)
			return rootfs.PathErr("stat", clean, err)
		}
		err = tarEntry(tw, pfd, name, name, &st, 0)
		unix.Close(pfd)
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

// tarEntry archives dirfd/name (stat st) as tarName, recursing into
// directories.
func tarEntry(tw *tar.Writer, dirfd int, name, tarName string, st *unix.Stat_t, depth int) error {
	hdr := &tar.Header{
		Name:    tarName,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: time.Unix(st.Mtim.Unix()),
		Format:  tar.FormatPAX,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		target, err := rootfs.ReadlinkAt(dirfd, name)
		if err != nil {
			return rootfs.PathErr("readlink", tarName, err)
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		return tw.WriteHeader(hdr)
	case unix.S_IFREG:
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			if err == unix.ENOENT || err == unix.ELOOP { // changed under us
				return nil
			}
			return rootfs.PathErr("open", tarName, err)
		}
		defer unix.Close(fd)
		var fst unix.Stat_t
		if err := unix.Fstat(fd, &fst); err != nil {
			return rootfs.PathErr("stat", tarName, err)
		}
		if !rootfs.IsReg(fst.Mode) {
			return nil
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, fst.Size
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		n, err := io.Copy(tw, io.LimitReader(rootfs.FDReader(fd), fst.Size))
		if err != nil {
			return rootfs.PathErr("read", tarName, err)
		}
		if n < fst.Size { // shrank while we read: pad to the promised size
			_, err = io.CopyN(tw, zeroReader{}, fst.Size-n)
		}
		return err
	case unix.S_IFDIR:
		if depth >= rootfs.MaxTreeDepth {
			return errdefs.TooLarge("directory tree deeper than %d levels", rootfs.MaxTreeDepth)
		}
		hdr.Typeflag, hdr.Name = tar.TypeDir, tarName+"/"
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if err == unix.ENOENT || err == unix.ELOOP || err == unix.ENOTDIR {
				return nil
			}
			return rootfs.PathErr("open", tarName, err)
		}
		defer unix.Close(fd)
		return tarDirEntries(tw, fd, tarName+"/", depth+1)
	}
	return nil // FIFOs, sockets, devices
}

// tarDirEntries archives the entries of an open directory under prefix.
// The contents of proc and sysfs mounts are skipped: they are not files;
// so are those of the secrets tmpfs (secretfiles.go): no archive of a
// sandbox carries its secrets.
func tarDirEntries(tw *tar.Writer, fd int, prefix string, depth int) error {
	var sfs unix.Statfs_t
	if unix.Fstatfs(fd, &sfs) == nil && (sfs.Type == unix.PROC_SUPER_MAGIC || sfs.Type == unix.SYSFS_MAGIC) {
		return nil
	}
	if sfs.Type == unix.TMPFS_MAGIC && isSecretsTmpfs(fd) {
		return nil
	}
	names, err := rootfs.ReadDirNames(fd, maxTarEntries)
	if err != nil {
		return rootfs.PathErr("list", "/"+prefix, err)
	}
	slices.Sort(names)
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if err == unix.ENOENT {
				continue
			}
			return rootfs.PathErr("stat", prefix+n, err)
		}
		if err := tarEntry(tw, fd, n, prefix+n, &st, depth); err != nil {
			return err
		}
	}
	return nil
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// handleWriteTar extracts the uploaded tar (data frames, end frame) into an
// existing directory and answers with an end frame.
func (s *server) handleWriteTar(cn *conn) error {
	clean, rel, err := rootfs.CleanPath(cn.req.Path)
	if err != nil {
		return err
	}
	dfd, err := s.root.Open(rel, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return rootfs.PathErr("extract into", clean, err)
	}
	defer unix.Close(dfd)
	r := &wire.DataReader{FR: cn.fr}
	uid, gid, err := s.ownerIDs(&cn.req)
	if err != nil {
		return err
	}
	opts := extractOpts{uid: uid, gid: gid, preserve: cn.req.PreserveOwner, maxBytes: s.cfg.MaxFileBytes, maxEntries: maxTarEntries}
	if err := extractTar(dfd, r, opts); err != nil {
		return err
	}
	// Read what follows the end marker up to the end frame.
	n, err := io.Copy(io.Discard, io.LimitReader(r, maxTarTrailer))
	if err != nil {
		return errdefs.Invalid("extract into %s: upload ended before its end", clean)
	}
	if n == maxTarTrailer {
		return errdefs.Invalid("extract into %s: data after the end of the archive", clean)
	}
	return cn.fw.Send(wire.FrameEnd, nil)
}

type extractOpts struct {
	uid, gid *int // owner of what is created; nil = the agent's
	// preserve: an entry is owned by its header's uid and gid; the
	// directories made on the way by uid and gid.
	preserve   bool
	maxBytes   int64
	maxEntries int
}

// resolveBeneath is how every parent of a tar entry is resolved from the
// destination: symlinks are followed only while they stay beneath it.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

// extractTar extracts an untrusted tar stream into the directory dfd.
// Entry names must be relative, without ".." components; every parent is
// resolved with RESOLVE_BENEATH from dfd; the last component is never
// followed (entries are created under a temporary name and renamed over
// it); hardlinks must point at an entry inside the destination; devices
// and FIFOs are refused. A bad entry stops the extraction with
// invalid_argument; the entries before it stay.
func extractTar(dfd int, r io.Reader, o extractOpts) error {
	tr := tar.NewReader(r)
	var total int64
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if errors.Is(err, wire.ErrProtocol) {
				return err
			}
			return errdefs.Invalid("bad tar archive: %v", err)
		}
		if n >= o.maxEntries {
			return errdefs.TooLarge("tar archive has more than %d entries", o.maxEntries)
		}
		if hdr.Size < 0 {
			return errdefs.Invalid("tar entry %q: negative size", hdr.Name)
		}
		if hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeGNUSparse {
			total += hdr.Size
			if total > o.maxBytes {
				return errdefs.TooLarge("tar archive holds more than %d bytes", o.maxBytes)
			}
		}
		if err := extractEntry(dfd, hdr, tr, o); err != nil {
			return err
		}
	}
}

// entryPath validates a tar entry name and returns its cleaned components;
// nil means the destination itself ("./").
func entryPath(name string) ([]string, error) {
	switch {
	case name == "":
		return nil, errdefs.Invalid("tar entry with an empty name")
	case len(name) > wire.MaxPathBytes:
		return nil, errdefs.Invalid("tar entry name longer than %d bytes", wire.MaxPathBytes)
	case strings.IndexByte(name, 0) >= 0:
		return nil, errdefs.Invalid("tar entry name contains a NUL byte")
	case name[0] == '/':
		return nil, errdefs.Invalid("tar entry %q: absolute name", name)
	}
	var parts []string
	for _, c := range strings.Split(name, "/") {
		switch c {
		case "..":
			return nil, errdefs.Invalid("tar entry %q: \"..\" component", name)
		case "", ".":
			continue
		}
		parts = append(parts, c)
	}
	return parts, nil
}

// openBeneath opens the directory rel (components) under dfd, creating
// missing directories (mode 0755, owned as opts say) if create is set.
func openBeneath(dfd int, parts []string, create bool, o extractOpts) (int, error) {
	if len(parts) == 0 {
		return unix.Dup(dfd)
	}
	rel := strings.Join(parts, "/")
	fd, err := rootfs.Openat2(dfd, rel, unix.O_PATH|unix.O_DIRECTORY, 0, resolveBeneath)
	if err != unix.ENOENT || !create {
		return fd, err
	}
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		fd, err := rootfs.Openat2(dfd, sub, unix.O_PATH|unix.O_DIRECTORY, 0, resolveBeneath)
		if err == nil {
			unix.Close(fd)
			continue
		}
		if err != unix.ENOENT {
			return -1, err
		}
		pfd, err := openBeneath(dfd, parts[:i], false, o)
		if err != nil {
			return -1, err
		}
		err = mkdirOwned(pfd, parts[i], 0o755, o)
		unix.Close(pfd)
		if err != nil && err != unix.EEXIST {
			return -1, err
		}
	}
	return rootfs.Openat2(dfd, rel, unix.O_PATH|unix.O_DIRECTORY, 0, resolveBeneath)
}

// mkdirOwned creates a directory and sets its mode and owner through an fd
// opened with O_NOFOLLOW, so a racing swap cannot redirect the chmod.
func mkdirOwned(pfd int, name string, mode uint32, o extractOpts) error {
	if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
		return err
	}
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if o.uid != nil || o.gid != nil {
		if err := unix.Fchown(fd, intOr(o.uid, -1), intOr(o.gid, -1)); err != nil {
			return err
		}
	}
	return unix.Fchmod(fd, mode)
}

func extractEntry(dfd int, hdr *tar.Header, tr io.Reader, o extractOpts) error {
	parts, err := entryPath(hdr.Name)
	if err != nil {
		return err
	}
	if len(parts) == 0 {
		if hdr.Typeflag == tar.TypeDir {
			return nil // "./": the destination itself
		}
		return errdefs.Invalid("tar entry %q: not a directory but names the destination", hdr.Name)
	}
	name := parts[len(parts)-1]
	bad := func(err error) error {
		var de *errdefs.Error
		if errors.As(err, &de) {
			return err
		}
		if errno, ok := err.(unix.Errno); ok && (errno == unix.EXDEV || errno == unix.ELOOP || errno == unix.ENOTDIR) {
			return errdefs.Invalid("tar entry %q: resolves outside the destination or through a non-directory", hdr.Name)
		}
		return rootfs.PathErr("extract", hdr.Name, err)
	}
	pfd, err := openBeneath(dfd, parts[:len(parts)-1], true, o)
	if err != nil {
		return bad(err)
	}
	defer unix.Close(pfd)
	if o.preserve {
		// The archive's owner, as the sandbox sees ids: one outside
		// its user namespace's range fails the chown (EINVAL).
		if hdr.Uid < 0 || hdr.Gid < 0 || hdr.Uid >= 1<<32-1 || hdr.Gid >= 1<<32-1 {
			return errdefs.Invalid("tar entry %q: bad owner %d:%d", hdr.Name, hdr.Uid, hdr.Gid)
		}
		u, g := hdr.Uid, hdr.Gid
		o.uid, o.gid = &u, &g
	}
	mode := uint32(hdr.Mode) & 0o7777
	switch hdr.Typeflag {
	case tar.TypeDir:
		var st unix.Stat_t
		err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil && rootfs.IsDir(st.Mode) {
			return nil // keep what is there, as tar does
		}
		if err == nil {
			if err := unix.Unlinkat(pfd, name, 0); err != nil {
				return bad(err)
			}
		}
		return bad(mkdirOwned(pfd, name, mode, o))
	case tar.TypeReg, tar.TypeGNUSparse: // tar.Reader reports the old TypeRegA as TypeReg
		_, err := writeAtomic(pfd, name, hdr.Name, mode, o.uid, o.gid, nil, io.LimitReader(tr, hdr.Size), hdr.Size)
		if err != nil {
			return bad(err)
		}
		return nil
	case tar.TypeSymlink:
		if hdr.Linkname == "" || len(hdr.Linkname) > wire.MaxPathBytes || strings.IndexByte(hdr.Linkname, 0) >= 0 {
			return errdefs.Invalid("tar entry %q: bad symlink target", hdr.Name)
		}
		// The target is data; it is never followed while extracting.
		return bad(replaceWith(pfd, name, o, func(tmp string) error {
			return unix.Symlinkat(hdr.Linkname, pfd, tmp)
		}))
	case tar.TypeLink:
		src, err := entryPath(hdr.Linkname)
		if err != nil {
			return errdefs.Invalid("tar entry %q: hardlink target: %v", hdr.Name, errdefs.Message(err))
		}
		if len(src) == 0 {
			return errdefs.Invalid("tar entry %q: hardlink to the destination", hdr.Name)
		}
		sfd, err := openBeneath(dfd, src[:len(src)-1], false, o)
		if err != nil {
			return bad(err)
		}
		defer unix.Close(sfd)
		var st unix.Stat_t
		if err := unix.Fstatat(sfd, src[len(src)-1], &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return bad(err)
		}
		if !rootfs.IsReg(st.Mode) && !rootfs.IsLink(st.Mode) {
			return errdefs.Invalid("tar entry %q: hardlink to a non-file", hdr.Name)
		}
		// linkat without AT_SYMLINK_FOLLOW links a symlink itself.
		return bad(replaceWith(pfd, name, extractOpts{}, func(tmp string) error {
			return unix.Linkat(sfd, src[len(src)-1], pfd, tmp, 0)
		}))
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return errdefs.Invalid("tar entry %q: devices and FIFOs are not allowed", hdr.Name)
	case tar.TypeXGlobalHeader:
		return nil
	}
	return errdefs.Invalid("tar entry %q: unsupported type %q", hdr.Name, hdr.Typeflag)
}

// replaceWith creates an entry under a temporary name with mk, sets its
// owner, and renames it over name.
func replaceWith(pfd int, name string, o extractOpts, mk func(tmp string) error) error {
	tmp := tempName()
	if err := mk(tmp); err != nil {
		return err
	}
	if o.uid != nil || o.gid != nil {
		if err := unix.Fchownat(pfd, tmp, intOr(o.uid, -1), intOr(o.gid, -1), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			unix.Unlinkat(pfd, tmp, 0)
			return err
		}
	}
	if err := unix.Renameat(pfd, tmp, pfd, name); err != nil {
		unix.Unlinkat(pfd, tmp, 0)
		return err
	}
	return nil
}
