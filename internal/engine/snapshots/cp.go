package snapshots

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"path"
	"strings"

	"github.com/berth-sh/berth/internal/engine/files"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Copy copies a file or directory from one sandbox to another (or within
// one), directly, with docker cp's rules; the data never lands on the host.
//
//   - A file becomes ToPath when ToPath is missing or a file (replaced),
//     and goes into ToPath under its own name when ToPath is a directory.
//     A missing ToPath ending in "/" is an error, as with docker.
//   - A directory becomes ToPath when ToPath is missing (created, with
//     missing parents), and goes into ToPath under its own name when
//     ToPath is a directory, unless FromPath ends in "/.", which copies
//     only its contents. A directory onto a file is a conflict.
//   - What the copy creates is owned by the destination sandbox's user
//     (docker cp's rule: the container's root there), or, with
//     PreserveOwner, by the owners the source shows (archive mode).
func (m *Snapshots) Copy(ctx context.Context, req *CopyRequest, actor string) error {
	if !strings.HasPrefix(req.FromPath, "/") || !strings.HasPrefix(req.ToPath, "/") {
		return errdefs.Invalid("from_path and to_path must be absolute")
	}
	src, err := m.files.Files(ctx, req.From, false, actor)
	if err != nil {
		return err
	}
	defer src.Close()
	sfi, err := src.Stat(ctx, req.FromPath)
	if err != nil {
		return err
	}
	dst, err := m.files.Files(ctx, req.To, true, actor)
	if err != nil {
		return err
	}
	defer dst.Close()
	dfi, err := dst.Stat(ctx, req.ToPath)
	dstExists := err == nil
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	// The agent archives FromPath under its base name ("out", "out/a");
	// "/" is archived without one.
	base := path.Base(path.Clean(req.FromPath))
	if base == "/" {
		base = ""
	}
	contentsOnly := strings.HasSuffix(req.FromPath, "/.") || base == ""
	trailing := strings.HasSuffix(req.ToPath, "/")
	cleanTo := path.Clean(req.ToPath)

	var dir, rename string // extract into dir, renaming base to rename ("" = keep; "." = strip)
	switch {
	case !sfi.IsDir && dstExists && dfi.IsDir:
		dir = cleanTo
	case !sfi.IsDir && !dstExists && trailing:
		return errdefs.NotFound("copy to %s:%s: the destination directory does not exist", req.To, req.ToPath)
	case !sfi.IsDir:
		if cleanTo == "/" {
			return errdefs.Conflict("copy to %s:/: is a directory", req.To)
		}
		dir, rename = path.Dir(cleanTo), path.Base(cleanTo)
	case dstExists && !dfi.IsDir:
		return errdefs.Conflict("cannot copy directory %s:%s onto file %s:%s", req.From, req.FromPath, req.To, req.ToPath)
	case dstExists && !contentsOnly:
		dir = cleanTo
	case !dstExists && base != "" && cleanTo != "/":
		// A directory into a missing ToPath: the extraction makes it,
		// owned as what it holds; missing parents are made first.
		dir, rename = path.Dir(cleanTo), path.Base(cleanTo)
		if _, err := dst.Stat(ctx, dir); errors.Is(err, errdefs.ErrNotFound) {
			if err := dst.Mkdir(ctx, dir, 0o755, true, actor); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
	default: // a directory's contents into an existing ToPath (or "/" into a missing one)
		dir, rename = cleanTo, "."
		if !dstExists {
			if err := dst.Mkdir(ctx, cleanTo, 0o755, true, actor); err != nil {
				return err
			}
		}
	}
	if base == "" {
		rename = ""
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(src.ReadTar(ctx, req.FromPath, pw)) }()
	tr, tw := io.Pipe()
	go func() { tw.CloseWithError(retar(pr, tw, base, rename)) }()
	own := files.Ownership{Preserve: req.PreserveOwner}
	if !own.Preserve {
		own.Owner = dst.Owner("")
	}
	err = dst.WriteTarAs(ctx, dir, tr, own, actor)
	tr.CloseWithError(io.ErrClosedPipe)
	pr.CloseWithError(io.ErrClosedPipe)
	return err
}

// retar copies the tar stream r to w with the entries named base or under
// base/ renamed to rename or under rename/ ("." puts what is under base at
// the top and drops base itself); rename "" copies them as they are. The
// stream comes from a sandbox's agent: entries outside base are dropped
// when renaming, and the names that reach the other agent are checked by
// it again on extraction.
func retar(r io.Reader, w io.Writer, base, rename string) error {
	trd := tar.NewReader(r)
	twr := tar.NewWriter(w)
	for {
		hdr, err := trd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if rename != "" {
			name, ok := renamed(hdr.Name, base, rename)
			if !ok {
				continue
			}
			if hdr.Typeflag == tar.TypeLink {
				ln, ok := renamed(hdr.Linkname, base, rename)
				if !ok || ln == "" {
					continue
				}
				hdr.Linkname = ln
			}
			hdr.Name = name
		}
		if err := twr.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(twr, trd); err != nil {
			return err
		}
	}
	return twr.Close()
}

// renamed maps an archive name under base to one under rename; ok is
// false for names outside base, and for base itself when rename is ".".
func renamed(name, base, rename string) (string, bool) {
	dir := strings.HasSuffix(name, "/")
	n := strings.TrimSuffix(name, "/")
	var rest string
	switch {
	case n == base:
	case strings.HasPrefix(n, base+"/"):
		rest = n[len(base)+1:]
	default:
		return "", false
	}
	var out string
	switch {
	case rename == "." && rest == "":
		return "", false
	case rename == ".":
		out = rest
	case rest == "":
		out = rename
	default:
		out = rename + "/" + rest
	}
	if dir {
		out += "/"
	}
	return out, true
}
