package agentd

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"

	"github.com/berth-sh/berth/internal/agent/rootfs"

	"github.com/berth-sh/berth/internal/agent/wire"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

func (s *server) handleStat(cn *conn) error {
	fi, err := s.root.Stat(cn.req.Path)
	if err != nil {
		return err
	}
	s.cfg.IDs.info(&fi)
	return cn.fw.SendJSON(wire.FrameResult, fi)
}

// handleList sends one result frame per entry, then an end frame.
func (s *server) handleList(cn *conn) error {
	err := s.root.List(cn.req.Path, func(fi wire.FileInfo) error {
		s.cfg.IDs.info(&fi)
		b, err := json.Marshal(fi)
		if err != nil {
			return err
		}
		return cn.fw.Write(wire.FrameResult, b)
	})
	if err != nil {
		return err
	}
	return cn.fw.Send(wire.FrameEnd, nil)
}

// handleReadFile sends a result frame with the file's info, its bytes as
// data frames, and an end frame. Only regular files are read; the open is
// non-blocking so that a FIFO cannot hang the agent.
func (s *server) handleReadFile(cn *conn) error {
	clean, rel, err := rootfs.CleanPath(cn.req.Path)
	if err != nil {
		return err
	}
	fd, err := s.root.Open(rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return rootfs.PathErr("open", clean, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return rootfs.PathErr("stat", clean, err)
	}
	if !rootfs.IsReg(st.Mode) {
		return errdefs.Invalid("read %s: not a regular file", clean)
	}
	fi := rootfs.Info(clean, &st, "")
	s.cfg.IDs.info(&fi)
	if err := cn.fw.SendJSON(wire.FrameResult, fi); err != nil {
		return err
	}
	buf := make([]byte, wire.DataChunk)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return rootfs.PathErr("read", clean, err)
		}
		if n == 0 {
			break
		}
		if err := cn.fw.Write(wire.FrameData, buf[:n]); err != nil {
			return err
		}
	}
	return cn.fw.Send(wire.FrameEnd, nil)
}

// tempName returns a name for an upload's temporary file beside its target.
func tempName() string {
	var b [8]byte
	rand.Read(b[:])
	return ".berth-tmp-" + hex.EncodeToString(b[:])
}

// handleWriteFile receives data frames and an end frame, writes them to a
// temporary file in the target's directory and renames it over the target,
// so a failed or oversized upload leaves the old file intact. It answers
// with a result frame carrying the new file's info.
func (s *server) handleWriteFile(cn *conn) error {
	req := cn.req
	clean, rel, err := rootfs.CleanPath(req.Path)
	if err != nil {
		return err
	}
	if rel == "." {
		return errdefs.Conflict("write /: is a directory")
	}
	pfd, name, err := s.root.OpenParent(clean)
	if err != nil {
		return rootfs.PathErr("write", clean, err)
	}
	defer unix.Close(pfd)
	mode := req.Mode & 0o7777
	var old unix.Stat_t
	switch err := unix.Fstatat(pfd, name, &old, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && rootfs.IsDir(old.Mode):
		return errdefs.Conflict("write %s: is a directory", clean)
	case err == nil && rootfs.IsReg(old.Mode) && mode == 0:
		mode = old.Mode & 0o7777 // an overwrite keeps the mode unless told
	case err != nil && err != unix.ENOENT:
		return rootfs.PathErr("write", clean, err)
	}
	if mode == 0 {
		mode = 0o644
	}
	uid, gid, err := s.ownerIDs(&req)
	if err != nil {
		return err
	}
	if err := rootfs.CheckXattrs(req.Xattrs); err != nil {
		return err
	}
	fi, err := writeAtomic(pfd, name, clean, mode, uid, gid, req.Xattrs, &wire.DataReader{FR: cn.fr}, s.cfg.MaxFileBytes)
	if err != nil {
		return err
	}
	return cn.fw.SendJSON(wire.FrameResult, fi)
}

// writeAtomic writes r (at most limit bytes) to a new temporary file in
// dirfd and renames it over name, which is replaced whatever it is (a
// symlink there is replaced, never followed).
//
// xattrs (user namespace, checked by the caller) are set on the new file
// before it replaces the old one, so an overwrite keeps none of the old
// file's.
func writeAtomic(dirfd int, name, clean string, mode uint32, uid, gid *int, xattrs map[string]string, r io.Reader, limit int64) (wire.FileInfo, error) {
	tmp := tempName()
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return wire.FileInfo{}, rootfs.PathErr("create", clean, err)
	}
	done := false
	defer func() {
		if fd >= 0 {
			unix.Close(fd)
		}
		if !done {
			unix.Unlinkat(dirfd, tmp, 0)
		}
	}()
	n, err := io.Copy(fdWriter(fd), io.LimitReader(r, limit+1))
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return wire.FileInfo{}, errdefs.Invalid("write %s: upload ended before its end", clean)
		}
		return wire.FileInfo{}, rootfs.PathErr("write", clean, err)
	}
	if n > limit {
		return wire.FileInfo{}, errdefs.TooLarge("write %s: file exceeds %d bytes", clean, limit)
	}
	// The limited reader stopped at the cap: make sure the stream really
	// ended, and consume its end frame.
	if _, err := r.Read(make([]byte, 1)); err != io.EOF {
		if err == nil {
			return wire.FileInfo{}, errdefs.TooLarge("write %s: file exceeds %d bytes", clean, limit)
		}
		return wire.FileInfo{}, rootfs.PathErr("write", clean, err)
	}
	if uid != nil || gid != nil {
		if err := unix.Fchown(fd, intOr(uid, -1), intOr(gid, -1)); err != nil {
			return wire.FileInfo{}, rootfs.PathErr("chown", clean, err)
		}
	}
	// After chown, which clears set-id bits.
	if err := unix.Fchmod(fd, mode); err != nil {
		return wire.FileInfo{}, rootfs.PathErr("chmod", clean, err)
	}
	if err := rootfs.SetXattrs(fd, clean, xattrs); err != nil {
		return wire.FileInfo{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return wire.FileInfo{}, rootfs.PathErr("stat", clean, err)
	}
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		return wire.FileInfo{}, rootfs.PathErr("rename", clean, err)
	}
	done = true
	fi := rootfs.Info(clean, &st, "")
	fi.Xattrs = rootfs.UserXattrs(rootfs.FDPath(fd, ""), true)
	return fi, nil
}

func intOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// fdWriter writes to a raw fd.
type fdWriter int

func (w fdWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Write(int(w), p[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

// ownerIDs is who owns what a write request creates: its Owner resolved
// in the sandbox, else its UID and GID (nil: the agent's).
func (s *server) ownerIDs(req *wire.Request) (uid, gid *int, err error) {
	if s.cfg.IDs != nil && (req.Owner != "" || req.PreserveOwner || req.UID != nil || req.GID != nil) {
		// The daemon's own server over a sandbox's root from the host
		// (IDShift) runs as the host's root: it gives nothing away.
		return nil, nil, errdefs.Invalid("owners are not set from the host side")
	}
	if req.Owner == "" {
		return req.UID, req.GID, nil
	}
	cred, err := s.root.ResolveUser(req.Owner)
	if err != nil {
		return nil, nil, err
	}
	u, g := int(cred.Uid), int(cred.Gid)
	return &u, &g, nil
}

// mkdir makes req.Path; with an owner, the directory and every parent
// the call made are the owner's (a parent that was there stays as it
// was), so a sandbox's own user can write into what the files API made.
func (s *server) mkdir(req wire.Request) error {
	if req.Owner == "" {
		return s.root.Mkdir(req.Path, req.Mode, req.Parents)
	}
	cred, err := s.root.ResolveUser(req.Owner)
	if err != nil {
		return err
	}
	created, err := s.root.MkdirCreated(req.Path, req.Mode, req.Parents)
	if err != nil {
		return err
	}
	for _, p := range created {
		if err := s.root.ChownDir(p, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	// The target itself even when it was there (MkdirOwned: a workspace
	// made by the image is given to the sandbox's user); made here, it is
	// the last of created and already given.
	if clean, _, err := rootfs.CleanPath(req.Path); err == nil && len(created) > 0 && created[len(created)-1] == clean {
		return nil
	}
	return s.root.ChownDir(req.Path, int(cred.Uid), int(cred.Gid))
}
