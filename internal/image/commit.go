package image

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

const maxCommitDepth = 1024

var errCommitAborted = errors.New("commit aborted")

// CommitDir turns dir, the upper directory of a sandbox's overlay mount
// (host-id-shifted, holding overlay whiteouts and opaque markers), into a
// new read-only layer and returns its id and unpacked size.
//
// The id is "sha256:" of a deterministic OCI tar serialization of dir:
// members in byte order of their paths, container (unshifted) ids, mtimes
// to the nanosecond (PAX), user.* xattrs, whiteouts as ".wh.<name>" and
// opaque dirs as ".wh..wh..opq". Equal trees get equal ids, and the id is
// the diffID the layer would have if exported as an OCI layer. The layer
// itself is built by feeding that very stream through the same hardened
// extractor imports use, so it keeps whiteouts in overlay form.
//
// dir's content is sandbox-controlled: the walk never follows a symlink
// and opens nothing but directories and regular files, all below dir.
// Overlay redirect and metacopy xattrs are not understood; the runtime must
// mount with redirect_dir=off and metacopy=off. Device nodes, fifos and
// sockets are left out.
func (s *Store) CommitDir(ctx context.Context, dir string) (string, int64, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return "", 0, errdefs.NotFound("directory %s", dir)
		}
		return "", 0, fmt.Errorf("commit %s: %w", dir, err)
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		defer unix.Close(fd)
		err := serializeDir(ctx, fd, s.idmap, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	sum := sha256.New()
	r := io.TeeReader(pr, sum)
	id, stats, err := s.unpack(ctx, budgetOf(ctx), r, func() ([]byte, error) {
		if _, err := io.Copy(io.Discard, r); err != nil {
			return nil, err
		}
		return sum.Sum(nil), nil
	}, "")
	// Unblock and reap the writer whatever happened. A failing walk is the
	// root cause of whatever the extractor then saw.
	pr.CloseWithError(errCommitAborted)
	if werr := <-done; werr != nil && !errors.Is(werr, errCommitAborted) {
		err = werr
	}
	if err != nil {
		return "", 0, fmt.Errorf("commit %s: %w", dir, err)
	}
	s.log.Info("committed layer", "layer", "sha256:"+id, "bytes", stats.Bytes, "entries", stats.Entries)
	return "sha256:" + id, s.Size(id), nil
}

// serializeDir writes the tree below dirfd to w as a deterministic tar.
func serializeDir(ctx context.Context, dirfd int, idmap IDMap, w io.Writer) error {
	tw := tar.NewWriter(w)
	ser := &serializer{ctx: ctx, tw: tw, idmap: idmap, links: map[[2]uint64]string{}}
	var st unix.Stat_t
	if err := unix.Fstat(dirfd, &st); err != nil {
		return err
	}
	if err := ser.dir(dirfd, "", &st, 0); err != nil {
		return err
	}
	return tw.Close()
}

type serializer struct {
	ctx   context.Context
	tw    *tar.Writer
	idmap IDMap
	links map[[2]uint64]string // (dev, ino) of multiply-linked files -> first name
}

func (z *serializer) header(name string, st *unix.Stat_t) *tar.Header {
	return &tar.Header{
		Name:    name,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     z.idmap.containerID(z.idmap.HostUID, st.Uid),
		Gid:     z.idmap.containerID(z.idmap.HostGID, st.Gid),
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
		Format:  tar.FormatPAX,
	}
}

// dir writes directory fd (named rel, "" for the root) and its children.
func (z *serializer) dir(fd int, rel string, st *unix.Stat_t, depth int) error {
	if depth > maxCommitDepth {
		return errdefs.Invalid("directory tree deeper than %d levels", maxCommitDepth)
	}
	if err := z.ctx.Err(); err != nil {
		return err
	}
	name := rel + "/"
	if rel == "" {
		name = "./"
	}
	hdr := z.header(name, st)
	hdr.Typeflag = tar.TypeDir
	xattrs, opaque, err := readXattrs(fd)
	if err != nil {
		return fmt.Errorf("xattrs of %q: %w", name, err)
	}
	hdr.PAXRecords = xattrs
	if err := z.tw.WriteHeader(hdr); err != nil {
		return err
	}
	if opaque {
		if err := z.empty(rel, whiteoutOpaque); err != nil {
			return err
		}
	}
	dfd, err := unix.Dup(fd) // os.File closes what it wraps
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(dfd), name)
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("read %q: %w", name, err)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := z.child(fd, rel, n, depth); err != nil {
			return err
		}
	}
	return nil
}

func join(rel, n string) string {
	if rel == "" {
		return n
	}
	return rel + "/" + n
}

func (z *serializer) child(pfd int, rel, n string, depth int) error {
	p := join(rel, n)
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		fd, err := openDirBeneath(pfd, n)
		if err != nil {
			return fmt.Errorf("open %q: %w", p, err)
		}
		defer unix.Close(fd)
		var fst unix.Stat_t
		if err := unix.Fstat(fd, &fst); err != nil {
			return err
		}
		return z.dir(fd, p, &fst, depth+1)

	case unix.S_IFREG:
		fd, err := openBeneath(pfd, n, unix.O_RDONLY|unix.O_NONBLOCK)
		if err != nil {
			return fmt.Errorf("open %q: %w", p, err)
		}
		f := os.NewFile(uintptr(fd), p)
		defer f.Close()
		var fst unix.Stat_t
		if err := unix.Fstat(fd, &fst); err != nil {
			return err
		}
		if fst.Mode&unix.S_IFMT != unix.S_IFREG {
			return fmt.Errorf("%q changed type during commit", p)
		}
		hdr := z.header(p, &fst)
		if fst.Nlink > 1 {
			key := [2]uint64{fst.Dev, fst.Ino}
			if first, ok := z.links[key]; ok {
				hdr.Typeflag = tar.TypeLink
				hdr.Linkname = first
				return z.tw.WriteHeader(hdr)
			}
			z.links[key] = p
		}
		hdr.Typeflag = tar.TypeReg
		hdr.Size = fst.Size
		xattrs, _, err := readXattrs(fd)
		if err != nil {
			return fmt.Errorf("xattrs of %q: %w", p, err)
		}
		hdr.PAXRecords = xattrs
		if err := z.tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.CopyN(z.tw, f, fst.Size); err != nil {
			return fmt.Errorf("read %q (changed during commit?): %w", p, err)
		}
		return nil

	case unix.S_IFLNK:
		buf := make([]byte, unix.PathMax)
		k, err := unix.Readlinkat(pfd, n, buf)
		if err != nil {
			return fmt.Errorf("readlink %q: %w", p, err)
		}
		hdr := z.header(p, &st)
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = string(buf[:k])
		hdr.Mode = 0o777
		return z.tw.WriteHeader(hdr)

	case unix.S_IFCHR:
		if st.Rdev == 0 {
			return z.empty(rel, whiteoutPrefix+n)
		}
	}
	return nil // devices, fifos, sockets: not part of a layer
}

// empty writes an empty marker file (whiteouts) into directory rel.
func (z *serializer) empty(rel, n string) error {
	return z.tw.WriteHeader(&tar.Header{
		Name: join(rel, n), Typeflag: tar.TypeReg, Mode: 0o644,
		ModTime: time.Unix(0, 0), Format: tar.FormatPAX,
	})
}

// readXattrs returns fd's user.* xattrs as PAX records and whether the
// directory is overlay-opaque.
func readXattrs(fd int) (map[string]string, bool, error) {
	sz, err := unix.Flistxattr(fd, nil)
	if errors.Is(err, unix.ENOTSUP) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if sz == 0 {
		return nil, false, nil
	}
	buf := make([]byte, sz)
	sz, err = unix.Flistxattr(fd, buf)
	if err != nil {
		return nil, false, err
	}
	var recs map[string]string
	opaque := false
	for _, k := range strings.Split(strings.TrimRight(string(buf[:sz]), "\x00"), "\x00") {
		keep := strings.HasPrefix(k, "user.") && !strings.HasPrefix(k, "user.overlay.")
		if !keep && k != opaqueXattr {
			continue
		}
		v, err := getxattr(fd, k)
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		if k == opaqueXattr {
			opaque = string(v) == "y"
			continue
		}
		if recs == nil {
			recs = map[string]string{}
		}
		recs[paxXattr+k] = string(v)
	}
	return recs, opaque, nil
}

func getxattr(fd int, k string) ([]byte, error) {
	for {
		sz, err := unix.Fgetxattr(fd, k, nil)
		if err != nil {
			return nil, err
		}
		buf := make([]byte, sz)
		n, err := unix.Fgetxattr(fd, k, buf)
		if errors.Is(err, unix.ERANGE) {
			continue // grew in between
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}
