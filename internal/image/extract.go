package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

const (
	whiteoutPrefix = ".wh."
	whiteoutMeta   = ".wh..wh." // reserved aufs metadata prefix
	whiteoutOpaque = ".wh..wh..opq"

	opaqueXattr  = "trusted.overlay.opaque"
	paxXattr     = "SCHILY.xattr."
	nobodyID     = 65534
	defaultMaxB  = 16 << 30
	defaultMaxN  = 1_000_000
	copyBufBytes = 128 << 10
	// writebackEvery is how many bytes of a file are written before their
	// writeback is started (writeFile).
	writebackEvery = 8 << 20
)

// extractLimits caps what one layer may unpack to.
type extractLimits struct {
	maxBytes   int64 // total regular-file bytes
	maxEntries int64 // archive members, of every type
	// budget, when set, is charged each regular file's size before it is
	// written: the tenant's storage left, shared by every layer of one
	// import, so a layer stops at min(maxBytes, what the import has left).
	budget *Budget
}

// extractStats describes what one extraction did.
type extractStats struct {
	Bytes   int64 // regular-file bytes written
	Entries int64 // archive members read
	Skipped int64 // device nodes, fifos and unknown types left out

	Sync time.Duration // unpack's syncfs before the rename took
}

// extractor unpacks one untrusted tar stream into a directory. Every
// filesystem operation is relative to an fd for a directory inside the
// layer opened with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), so neither
// ".." nor a symlink planted by an earlier member can redirect a write
// outside the layer.
type extractor struct {
	idmap  IDMap
	limits extractLimits
	log    *slog.Logger

	rootfd int
	stats  extractStats
	dirs   []dirTime // directory mtimes, applied last
	buf    []byte

	noWriteback bool // sync_file_range failed once: not tried again
}

type dirTime struct {
	rel   string
	mtime time.Time
}

// extractTar unpacks the tar stream r into the existing, empty directory dir.
// Malformed or hostile input yields an error wrapping errdefs.ErrInvalid;
// exceeding the limits, one wrapping errdefs.ErrTooLarge.
func extractTar(ctx context.Context, r io.Reader, dir string, idmap IDMap, limits extractLimits, log *slog.Logger) (extractStats, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return extractStats{}, fmt.Errorf("open layer dir: %w", err)
	}
	defer unix.Close(fd)
	x := &extractor{idmap: idmap, limits: limits, log: log, rootfd: fd, buf: make([]byte, copyBufBytes)}
	err = x.run(ctx, tar.NewReader(r))
	return x.stats, err
}

func (x *extractor) run(ctx context.Context, tr *tar.Reader) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return invalid("read tar header", err)
		}
		x.stats.Entries++
		if x.stats.Entries > x.limits.maxEntries {
			return errdefs.TooLarge("layer has more than %d entries", x.limits.maxEntries)
		}
		if err := x.limits.budget.take(EntryCharge); err != nil {
			return err
		}
		if err := x.entry(hdr, tr); err != nil {
			return err
		}
	}
	// Children change their parent's mtime, so directories get theirs last,
	// deepest first.
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		err := x.setMtime(d.rel, d.mtime)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV) {
			continue // replaced by a later member; its own metadata stands
		}
		if err != nil {
			return fmt.Errorf("set mtime of %q: %w", d.rel, err)
		}
	}
	return nil
}

// invalid wraps a cause as a user-facing ErrInvalid, unless it already has
// a category (a registry read failing, a cap hit) or is a cancellation:
// those keep theirs.
func invalid(what string, err error) error {
	var e *errdefs.Error
	if errors.As(err, &e) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return &errdefs.Error{Category: errdefs.ErrInvalid, Msg: "invalid layer archive: " + what, Err: err}
}

func (x *extractor) entry(hdr *tar.Header, tr *tar.Reader) error {
	rel, err := cleanEntryPath(hdr.Name)
	if err != nil {
		return invalid("bad member name", err)
	}
	dir, base := path.Split(rel)
	dir = path.Clean(dir) // "" -> "."
	uid, gid := x.idmap.hostUID(hdr.Uid), x.idmap.hostGID(hdr.Gid)
	rootUID, rootGID := x.idmap.hostUID(0), x.idmap.hostGID(0)

	if rel == "." {
		if hdr.Typeflag != tar.TypeDir {
			return invalid("bad member", fmt.Errorf("layer root %q is not a directory", hdr.Name))
		}
		x.dirs = append(x.dirs, dirTime{rel: ".", mtime: hdr.ModTime})
		return x.setMeta(x.rootfd, hdr, uid, gid)
	}

	// Whiteouts become what overlayfs understands, since the layer is used
	// as a lowerdir as it is.
	if strings.HasPrefix(base, whiteoutPrefix) {
		pfd, err := mkdirAllBeneath(x.rootfd, dir, rootUID, rootGID)
		if err != nil {
			return x.pathErr(rel, err)
		}
		defer unix.Close(pfd)
		switch {
		case base == whiteoutOpaque:
			if err := unix.Fsetxattr(pfd, opaqueXattr, []byte("y"), 0); err != nil {
				return fmt.Errorf("mark %q opaque: %w", dir, err)
			}
			return nil
		case strings.HasPrefix(base, whiteoutMeta):
			x.stats.Skipped++
			x.log.Debug("skipping aufs metadata entry", "name", rel)
			return nil
		}
		name := strings.TrimPrefix(base, whiteoutPrefix)
		if name == "" || name == "." || name == ".." {
			return invalid("bad whiteout", fmt.Errorf("whiteout %q names nothing", hdr.Name))
		}
		return x.whiteout(pfd, name, rootUID, rootGID)
	}

	pfd, err := mkdirAllBeneath(x.rootfd, dir, rootUID, rootGID)
	if err != nil {
		return x.pathErr(rel, err)
	}
	defer unix.Close(pfd)

	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := x.replace(pfd, base, true); err != nil {
			return x.pathErr(rel, err)
		}
		if err := unix.Mkdirat(pfd, base, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return x.pathErr(rel, err)
		}
		fd, err := openDirBeneath(pfd, base)
		if err != nil {
			return x.pathErr(rel, err)
		}
		defer unix.Close(fd)
		x.dirs = append(x.dirs, dirTime{rel: rel, mtime: hdr.ModTime})
		return x.setMeta(fd, hdr, uid, gid)

	case tar.TypeReg, tar.TypeGNUSparse:
		if hdr.Size < 0 || hdr.Size > x.limits.maxBytes-x.stats.Bytes {
			return errdefs.TooLarge("layer unpacks to more than %d bytes", x.limits.maxBytes)
		}
		// Charged before a byte is written: a refused file leaves nothing
		// on disk beyond the scratch dir the caller removes.
		if err := x.limits.budget.take(hdr.Size); err != nil {
			return err
		}
		if err := x.replace(pfd, base, false); err != nil {
			return x.pathErr(rel, err)
		}
		fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return x.pathErr(rel, err)
		}
		f := os.NewFile(uintptr(fd), base)
		n, err := x.writeFile(f, tarReader{io.LimitReader(tr, hdr.Size)})
		x.stats.Bytes += n
		if err == nil && n != hdr.Size {
			err = invalid("short file", fmt.Errorf("%q: got %d of %d bytes", rel, n, hdr.Size))
		}
		if err == nil {
			err = x.setMeta(fd, hdr, uid, gid)
		}
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("write %q: %w", rel, cerr)
		}
		if err != nil {
			return err
		}
		return x.setTimes(pfd, base, hdr.ModTime)

	case tar.TypeSymlink:
		if hdr.Linkname == "" || strings.ContainsRune(hdr.Linkname, 0) {
			return invalid("bad symlink", fmt.Errorf("%q has an empty or NUL target", rel))
		}
		if err := x.replace(pfd, base, false); err != nil {
			return x.pathErr(rel, err)
		}
		// The target is stored verbatim: it is only ever resolved inside
		// the sandbox's mount namespace, never by berth on the host.
		if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
			return x.pathErr(rel, err)
		}
		if err := unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return x.pathErr(rel, err)
		}
		return x.setTimes(pfd, base, hdr.ModTime)

	case tar.TypeLink:
		target, err := cleanEntryPath(hdr.Linkname)
		if err != nil || target == "." {
			return invalid("bad hardlink", fmt.Errorf("%q -> %q: %v", rel, hdr.Linkname, err))
		}
		tdir, tbase := path.Split(target)
		tfd, err := openDirBeneath(x.rootfd, path.Clean(tdir))
		if err != nil {
			return invalid("bad hardlink", fmt.Errorf("%q -> %q: %w", rel, hdr.Linkname, err))
		}
		defer unix.Close(tfd)
		var st unix.Stat_t
		if err := unix.Fstatat(tfd, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return invalid("bad hardlink", fmt.Errorf("%q -> %q: target not extracted: %w", rel, hdr.Linkname, err))
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return invalid("bad hardlink", fmt.Errorf("%q -> %q: target is a directory", rel, hdr.Linkname))
		}
		if target == rel {
			return nil // a link to itself changes nothing
		}
		if err := x.replace(pfd, base, false); err != nil {
			return x.pathErr(rel, err)
		}
		// flags 0: link the target entry itself, never what it points to.
		if err := unix.Linkat(tfd, tbase, pfd, base, 0); err != nil {
			return x.pathErr(rel, err)
		}
		return nil

	case tar.TypeChar:
		if hdr.Devmajor == 0 && hdr.Devminor == 0 {
			// Already in overlay form (as CommitDir layers carry them).
			return x.whiteout(pfd, base, rootUID, rootGID)
		}
		fallthrough
	case tar.TypeBlock, tar.TypeFifo:
		x.stats.Skipped++
		x.log.Debug("skipping special file", "name", rel, "type", string(hdr.Typeflag))
		return nil

	case tar.TypeXGlobalHeader:
		return nil

	default:
		x.stats.Skipped++
		x.log.Debug("skipping unknown tar member type", "name", rel, "type", string(hdr.Typeflag))
		return nil
	}
}

// writeFile copies r to f and starts the writeback of what it wrote as
// it goes (sync_file_range SYNC_FILE_RANGE_WRITE, which does not wait for
// the disk): the syncfs before the layer is renamed into place then finds
// little left to write, where it would otherwise write the whole layer
// after the last byte arrived (dirty pages are otherwise written back
// only past vm.dirty_background_ratio or after 30 s). The disk thus works
// while the rest of the layer is still being read.
func (x *extractor) writeFile(f *os.File, r io.Reader) (int64, error) {
	var n, flushed int64
	for {
		m, rerr := r.Read(x.buf)
		if m > 0 {
			w, err := f.Write(x.buf[:m])
			n += int64(w)
			if err != nil {
				return n, err
			}
			if n-flushed >= writebackEvery {
				x.writeback(f, flushed, n-flushed)
				flushed = n
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return n, rerr
		}
	}
	if n > flushed {
		x.writeback(f, flushed, n-flushed)
	}
	return n, nil
}

// writeback starts writing f's bytes [off, off+n) to disk. It is only a
// head start for the syncfs that makes the layer durable, so a failure
// (a filesystem without it) is ignored.
func (x *extractor) writeback(f *os.File, off, n int64) {
	if x.noWriteback {
		return
	}
	if err := unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE); err != nil {
		x.noWriteback = true
	}
}

// whiteout creates an overlayfs whiteout (char device 0/0) named name in pfd.
func (x *extractor) whiteout(pfd int, name string, uid, gid int) error {
	if err := x.replace(pfd, name, false); err != nil {
		return x.pathErr(name, err)
	}
	// A character device 0/0 with mode 0 is an overlay whiteout.
	if err := unix.Mknodat(pfd, name, unix.S_IFCHR, int(unix.Mkdev(0, 0))); err != nil {
		return fmt.Errorf("create whiteout %q: %w", name, err)
	}
	return unix.Fchownat(pfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
}

// replace removes what stands at name in pfd so a new member can take its
// place, as tar semantics require; an existing directory is kept when the
// new member is a directory too.
func (x *extractor) replace(pfd int, name string, isDir bool) error {
	var st unix.Stat_t
	err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	if isDir && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return nil
	}
	return removeAllAt(pfd, name)
}

// setMeta sets owner, mode (after chown, which clears setuid) and user.*
// xattrs on an open fd.
func (x *extractor) setMeta(fd int, hdr *tar.Header, uid, gid int) error {
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return fmt.Errorf("chown %q: %w", hdr.Name, err)
	}
	if err := unix.Fchmod(fd, uint32(hdr.Mode&0o7777)); err != nil {
		return fmt.Errorf("chmod %q: %w", hdr.Name, err)
	}
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, paxXattr)
		if !ok {
			continue
		}
		// Only user.* is kept: trusted.* and security.* would let an image
		// steer overlayfs or the LSM on the host; user.overlay.* would do the
		// same for a userxattr overlay mount.
		if !strings.HasPrefix(name, "user.") || strings.HasPrefix(name, "user.overlay.") {
			continue
		}
		if err := unix.Fsetxattr(fd, name, []byte(v), 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ERANGE) || errors.Is(err, unix.E2BIG) || errors.Is(err, unix.ENOSPC) {
				x.log.Debug("dropping xattr", "name", hdr.Name, "xattr", name, "err", err)
				continue
			}
			return fmt.Errorf("set xattr %s on %q: %w", name, hdr.Name, err)
		}
	}
	return nil
}

func (x *extractor) setTimes(pfd int, name string, mtime time.Time) error {
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, toTimespec(mtime)}
	if err := unix.UtimesNanoAt(pfd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set mtime of %q: %w", name, err)
	}
	return nil
}

func (x *extractor) setMtime(rel string, mtime time.Time) error {
	if rel == "." {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, toTimespec(mtime)}
		return unix.UtimesNanoAt(x.rootfd, ".", ts, 0)
	}
	dir, base := path.Split(rel)
	pfd, err := openDirBeneath(x.rootfd, path.Clean(dir))
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	return x.setTimes(pfd, base, mtime)
}

func toTimespec(t time.Time) unix.Timespec {
	if t.IsZero() {
		return unix.Timespec{Sec: 0}
	}
	return unix.NsecToTimespec(t.UnixNano())
}

// pathErr classifies a filesystem error for member rel: a lookup refused
// because it would cross a symlink or leave the layer is the archive's
// fault; anything else is ours.
func (x *extractor) pathErr(rel string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV), errors.Is(err, unix.ENOTDIR),
		errors.Is(err, unix.ENAMETOOLONG), errors.Is(err, unix.EEXIST), errors.Is(err, unix.EMLINK):
		return invalid("bad member", fmt.Errorf("%q: %w", rel, err))
	}
	return fmt.Errorf("extract %q: %w", rel, err)
}

// tarReader marks errors reading member data as the archive's fault, so
// they are told apart from errors writing to the layer.
type tarReader struct{ r io.Reader }

func (t tarReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err != nil && err != io.EOF {
		err = invalid("read file data", err)
	}
	return n, err
}

// hostUID maps a container uid from an archive to the host.
func (m IDMap) hostUID(c int) int { return m.toHost(m.HostUID, c) }

// hostGID maps a container gid from an archive to the host.
func (m IDMap) hostGID(c int) int { return m.toHost(m.HostGID, c) }

func (m IDMap) toHost(base uint32, c int) int {
	if m.Size == 0 {
		if c < 0 || c > math.MaxUint32-1 {
			return nobodyID
		}
		return c
	}
	if c >= 0 && uint64(c) < uint64(m.Size) {
		return int(base) + c
	}
	return int(base) + nobodyID
}

// containerID maps a host id found in a committed directory back into the
// container's range, for the archive form of the layer.
func (m IDMap) containerID(base uint32, h uint32) int {
	if m.Size == 0 {
		return int(h)
	}
	if h >= base && uint64(h) < uint64(base)+uint64(m.Size) {
		return int(h - base)
	}
	return nobodyID
}
