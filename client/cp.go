package client

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Copies between the local machine and a sandbox, with docker cp's rules.
// Sandbox to sandbox is Copy (the daemon does it; nothing passes through
// the caller).

// CopyToSandbox copies the local file or directory src into sandbox id at
// dst, as docker cp does: a file is copied to dst, or into dst when dst is
// an existing directory (a missing dst ending in "/" is an error); a
// directory becomes dst when dst does not exist, or dst/<name of src> when
// it does, and src ending in "/." copies only its contents. Ownership is not
// kept: in the sandbox the files belong to its user (root if it has none).
func (c *Client) CopyToSandbox(ctx context.Context, src, id, dst string) error {
	return c.CopyToSandboxWith(ctx, src, id, dst, WriteOptions{})
}

// CopyToSandboxWith is CopyToSandbox with the copy owned as o says: by
// o.User, or with o.PreserveOwner by the local files' uids and gids
// (archive mode, as docker cp -a).
func (c *Client) CopyToSandboxWith(ctx context.Context, src, id, dst string, o WriteOptions) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("cannot copy %s: %w", src, unwrapPathError(err))
	}
	dfi, err := c.Stat(ctx, id, dst)
	dstExists := err == nil
	if err != nil && !IsNotFound(err) {
		return err
	}
	if !fi.IsDir() {
		target := dst
		switch {
		case dstExists && dfi.IsDir:
			target = path.Join(dst, filepath.Base(src))
		case strings.HasSuffix(dst, "/"):
			// As docker: a file to a missing DST/ is an error.
			return fmt.Errorf("cannot copy to %s:%s: the destination directory does not exist", id, dst)
		}
		f, err := os.Open(src)
		if err != nil {
			return fmt.Errorf("cannot copy %s: %w", src, unwrapPathError(err))
		}
		defer f.Close()
		if o.PreserveOwner {
			// One file as a one-entry archive, to carry its owner.
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(writeTar(pw, src, path.Base(target), true)) }()
			err = c.WriteTarWith(ctx, id, path.Dir(target), pr, o)
			pr.CloseWithError(errors.New("upload ended"))
			return err
		}
		_, err = c.WriteFileWith(ctx, id, target, fi.Mode(), f, o)
		return err
	}

	// A directory: stream a tar of it. Into an existing directory it goes
	// as DST/<base> (unless SRC ends in "/."); otherwise DST is created and
	// receives SRC's contents.
	if dstExists && !dfi.IsDir {
		return fmt.Errorf("cannot copy directory %s onto file %s:%s", src, id, dst)
	}
	prefix := ""
	if dstExists && !strings.HasSuffix(src, string(filepath.Separator)+".") && src != "." {
		prefix = filepath.Base(filepath.Clean(src))
	}
	if clean := path.Clean(dst); !dstExists && clean != "/" {
		// The archive makes DST, owned as what it holds: it goes into
		// DST's parent (made first if missing) under DST's name.
		parent := path.Dir(clean)
		if _, err := c.Stat(ctx, id, parent); IsNotFound(err) {
			if err := c.Mkdir(ctx, id, parent, true); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		dst, prefix = parent, path.Base(clean)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, src, prefix, o.PreserveOwner)) }()
	err = c.WriteTarWith(ctx, id, dst, pr, o)
	pr.CloseWithError(errors.New("upload ended")) // unblocks writeTar if the upload failed
	return err
}

// writeTar writes the tree at root to w with names under prefix (or at the
// top when prefix is empty). Ownership is kept only with preserve (the
// local uids and gids); otherwise the daemon gives the files to the
// sandbox's user.
func writeTar(w io.Writer, root, prefix string, preserve bool) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if prefix != "" {
			name = path.Join(prefix, name)
		}
		if name == "." {
			return nil // the root itself: DST
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var link string
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		if !info.Mode().IsRegular() && !info.IsDir() && link == "" {
			return nil // sockets, devices, fifos: nothing to copy
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = name
		if info.IsDir() {
			hdr.Name += "/"
		}
		if !preserve {
			hdr.Uid, hdr.Gid = 0, 0
		}
		hdr.Uname, hdr.Gname = "", ""
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// CopyFromSandbox copies the file or directory src of sandbox id to the
// local path dst, as docker cp does (the same rules as CopyToSandbox, the
// other way). A file is written beside its target and renamed into place;
// a directory arrives as a tar stream that is extracted safely: absolute
// names, ".." and links leading outside the destination are refused.
func (c *Client) CopyFromSandbox(ctx context.Context, id, src, dst string) error {
	sfi, err := c.Stat(ctx, id, src)
	if err != nil {
		return err
	}
	lfi, lerr := os.Stat(dst)
	dstExists := lerr == nil
	if lerr != nil && !errors.Is(lerr, fs.ErrNotExist) {
		return fmt.Errorf("cannot copy to %s: %w", dst, unwrapPathError(lerr))
	}
	base := path.Base(path.Clean(src))

	if !sfi.IsDir {
		target := dst
		switch {
		case dstExists && lfi.IsDir():
			target = filepath.Join(dst, base)
		case strings.HasSuffix(dst, string(filepath.Separator)):
			return fmt.Errorf("cannot copy to %s: directory does not exist", dst)
		}
		return c.readFileTo(ctx, id, src, target)
	}

	if dstExists && !lfi.IsDir() {
		return fmt.Errorf("cannot copy directory %s:%s onto file %s", id, src, dst)
	}
	root := dst
	if dstExists && !strings.HasSuffix(src, "/.") {
		root = filepath.Join(dst, base)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("cannot copy to %s: %w", root, unwrapPathError(err))
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(c.ReadTar(ctx, id, src, pw)) }()
	err = extractTar(pr, root, base)
	pr.CloseWithError(errors.New("extraction ended")) // stops the download if extraction failed
	return err
}

// readFileTo downloads one file into a temporary file beside target and
// renames it into place, so a failed copy leaves no half-written file.
func (c *Client) readFileTo(ctx context.Context, id, src, target string) error {
	tmp, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".berth-*")
	if err != nil {
		return fmt.Errorf("cannot copy to %s: %w", target, unwrapPathError(err))
	}
	defer os.Remove(tmp.Name()) // after a successful rename this finds nothing
	mode, _, err := c.ReadFile(ctx, id, src, tmp)
	if err != nil {
		tmp.Close()
		return err
	}
	if mode == 0 {
		mode = 0o644
	}
	if err := tmp.Chmod(mode.Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), target)
}

// extractTar extracts a tar stream into dir. Entries may be named relative
// to the archived directory ("a.txt", "./a.txt") or, as docker archives
// are, under its base name ("work/a.txt"); both land in dir. Every write
// goes through an os.Root, so neither names nor symlinks in the archive can
// reach outside dir.
func extractTar(r io.Reader, dir, base string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	stripBase := false
	for first := true; ; first = false {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		name, err := archiveName(hdr.Name)
		if err != nil {
			return err
		}
		if first && base != "/" && base != "." && (name == base || strings.HasPrefix(name, base+"/")) {
			stripBase = true
		}
		strip := func(n string) string {
			if stripBase {
				n = strings.TrimPrefix(strings.TrimPrefix(n, base), "/")
			}
			if n == "" {
				return "."
			}
			return n
		}
		if hdr.Typeflag == tar.TypeLink {
			target, err := archiveName(hdr.Linkname)
			if err != nil || target == "" {
				return fmt.Errorf("refusing archive entry %q: hard link to %q", hdr.Name, hdr.Linkname)
			}
			hdr.Linkname = strip(target)
		}
		if err := extractEntry(root, tr, hdr, strip(name)); err != nil {
			return fmt.Errorf("extract %s: %w", hdr.Name, err)
		}
	}
}

// archiveName cleans an entry name and refuses the ones that would leave
// the destination.
func archiveName(n string) (string, error) {
	if strings.HasPrefix(n, "/") || strings.Contains(n, `\`) {
		return "", fmt.Errorf("refusing archive entry %q: absolute path", n)
	}
	for _, part := range strings.Split(n, "/") {
		if part == ".." {
			return "", fmt.Errorf("refusing archive entry %q: it contains a .. component", n)
		}
	}
	c := path.Clean(n)
	if c == "." {
		return "", nil
	}
	return c, nil
}

func extractEntry(root *os.Root, tr *tar.Reader, hdr *tar.Header, name string) error {
	perm := fs.FileMode(hdr.Mode).Perm()
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if name == "." {
			return nil
		}
		if err := root.MkdirAll(name, 0o755); err != nil {
			return err
		}
		return root.Chmod(name, perm|0o700) // keep it writable for what follows
	case tar.TypeReg:
		_ = root.Remove(name) // never write through an existing symlink
		f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, tr); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		_ = root.Chtimes(name, hdr.ModTime, hdr.ModTime)
		return nil
	case tar.TypeSymlink:
		_ = root.Remove(name)
		// The link is created as is; os.Root keeps any later access
		// through it inside dir.
		return root.Symlink(hdr.Linkname, name)
	case tar.TypeLink:
		// Linkname was checked and made relative to dir by extractTar.
		_ = root.Remove(name)
		return root.Link(hdr.Linkname, name)
	default:
		return nil // devices, fifos: not recreated
	}
}

// unwrapPathError drops the operation and path a *PathError repeats.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
