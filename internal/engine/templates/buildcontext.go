package templates

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/image/dockerfile"
)

// A Dockerfile build's context: the client's tar archive, read once into
// a spool file in the upload dir with an index of its entries by name.
// The daemon never writes a context path to the host: COPY and ADD take
// entries from the index and hand them to the build sandbox's agent,
// which writes them beneath the sandbox's root.

// Limits of a build context.
const (
	maxContextBytes   = 8 << 30
	maxContextEntries = 1 << 20
)

// DockerfileInContext is the name under which `berth template build -f`
// sends a Dockerfile kept outside its context; it is never copied.
const DockerfileInContext = ".berth-dockerfile"

type ctxEntry struct {
	hdr  tar.Header
	off  int64
	sum  string // sha256 of the content
	size int64
}

type buildContext struct {
	f       *os.File
	entries map[string]*ctxEntry
	names   []string // sorted
}

func (c *buildContext) Close() {
	if c.f != nil {
		c.f.Close()
		os.Remove(c.f.Name())
	}
}

// contextName checks an entry name of a context archive: relative,
// without "..", NUL or a leading "/"; returns it cleaned.
func contextName(name string) (string, error) {
	if name == "" || strings.IndexByte(name, 0) >= 0 || strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("entry %q: names must be relative", name)
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", fmt.Errorf("entry %q: a \"..\" component leads out of the context", name)
		}
	}
	return path.Clean(name), nil
}

// readContext spools a context archive into dir and indexes it; the
// Dockerfile named df is returned (and kept out of the index if it is
// DockerfileInContext); .dockerignore's patterns drop what they match.
func readContext(r io.Reader, dir, df string) (*buildContext, []byte, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	f, err := os.CreateTemp(dir, "context-*")
	if err != nil {
		return nil, nil, err
	}
	c := &buildContext{f: f, entries: map[string]*ctxEntry{}}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	tr := tar.NewReader(io.LimitReader(r, maxContextBytes+1))
	var off int64
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, errdefs.Invalid("build context: not a tar archive: %v", err)
		}
		if n >= maxContextEntries {
			return nil, nil, errdefs.TooLarge("build context: more than %d entries", maxContextEntries)
		}
		name, err := contextName(hdr.Name)
		if err != nil {
			return nil, nil, errdefs.Invalid("build context: %v", err)
		}
		if name == "." {
			continue
		}
		switch hdr.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
		case tar.TypeLink:
			return nil, nil, errdefs.Invalid("build context: entry %q is a hard link: send the file itself", hdr.Name)
		default:
			return nil, nil, errdefs.Invalid("build context: entry %q is a device, FIFO or other special file", hdr.Name)
		}
		e := &ctxEntry{hdr: *hdr, off: off}
		e.hdr.Name = name
		h := sha256.New()
		if hdr.Typeflag == tar.TypeReg {
			m, err := io.Copy(io.MultiWriter(f, h), tr)
			if err != nil {
				return nil, nil, errdefs.Invalid("build context: reading %q: %v", name, err)
			}
			off += m
			e.size = m
			if off > maxContextBytes {
				return nil, nil, errdefs.TooLarge("build context exceeds %d GiB", maxContextBytes>>30)
			}
		}
		e.sum = hex.EncodeToString(h.Sum(nil))
		if _, dup := c.entries[name]; !dup {
			c.names = append(c.names, name)
		}
		c.entries[name] = e
	}
	slices.Sort(c.names)
	dfe := c.entries[path.Clean(df)]
	if dfe == nil || dfe.hdr.Typeflag != tar.TypeReg {
		return nil, nil, errdefs.Invalid("build context: no Dockerfile %q in it", df)
	}
	if dfe.size > dockerfile.MaxSize {
		return nil, nil, errdefs.TooLarge("the Dockerfile is over %d bytes", dockerfile.MaxSize)
	}
	src, err := c.read(dfe)
	if err != nil {
		return nil, nil, err
	}
	c.drop(func(n string) bool { return n == DockerfileInContext })
	if ig := c.entries[".dockerignore"]; ig != nil && ig.hdr.Typeflag == tar.TypeReg && ig.size <= 1<<20 {
		data, err := c.read(ig)
		if err != nil {
			return nil, nil, err
		}
		patterns, err := ignorefile.ReadAll(bytes.NewReader(data))
		if err != nil {
			return nil, nil, errdefs.Invalid(".dockerignore: %v", err)
		}
		pm, err := patternmatcher.New(patterns)
		if err != nil {
			return nil, nil, errdefs.Invalid(".dockerignore: %v", err)
		}
		var perr error
		c.drop(func(n string) bool {
			m, err := pm.MatchesOrParentMatches(n)
			if err != nil {
				perr = err
			}
			return m
		})
		if perr != nil {
			return nil, nil, errdefs.Invalid(".dockerignore: %v", perr)
		}
	}
	ok = true
	return c, src, nil
}

func (c *buildContext) drop(match func(string) bool) {
	c.names = slices.DeleteFunc(c.names, func(n string) bool {
		if match(n) {
			delete(c.entries, n)
			return true
		}
		return false
	})
}

func (c *buildContext) read(e *ctxEntry) ([]byte, error) {
	b := make([]byte, e.size)
	if _, err := c.f.ReadAt(b, e.off); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b, nil
}

// isDir reports whether name is a directory of the context: an entry of
// that type, or the parent of entries (archives may leave directories out).
func (c *buildContext) isDir(name string) bool {
	if name == "." {
		return true
	}
	if e := c.entries[name]; e != nil {
		return e.hdr.Typeflag == tar.TypeDir
	}
	i, _ := slices.BinarySearch(c.names, name+"/")
	return i < len(c.names) && strings.HasPrefix(c.names[i], name+"/")
}

// match returns the context names a COPY source names: itself, or with
// wildcards, the names it matches.
func (c *buildContext) match(src string) []string {
	if !strings.ContainsAny(src, `*?[\`) {
		if c.entries[src] != nil || c.isDir(src) {
			return []string{src}
		}
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, n := range c.names {
		// A pattern matches names at its own depth; a deeper name counts
		// through its parent directory at that depth.
		parts := strings.Split(n, "/")
		depth := strings.Count(src, "/") + 1
		if len(parts) < depth {
			continue
		}
		cand := strings.Join(parts[:depth], "/")
		if seen[cand] {
			continue
		}
		if ok, _ := path.Match(src, cand); ok {
			seen[cand] = true
			out = append(out, cand)
		}
	}
	return out
}

// copyItem is one thing a COPY writes: the context names under src (or
// src itself), written as rel names under dir.
type copyItem struct {
	src    string // context name
	dir    string // absolute directory in the image
	asName string // the name src itself gets in dir ("" : its contents go into dir)
}

// plan returns what a COPY of srcs to dst writes, and a hash of the
// content it copies (the step's cache key part).
func (c *buildContext) plan(cp *dockerfile.Copy) ([]copyItem, string, error) {
	var items []copyItem
	h := sha256.New()
	for _, src := range cp.Srcs {
		names := c.match(src)
		if len(names) == 0 {
			return nil, "", errdefs.Invalid("%s: no such file or directory in the build context (or excluded by .dockerignore)", src)
		}
		if len(names) > 1 && !cp.DstIsDir {
			return nil, "", errdefs.Invalid("%s matches several files: the destination must end with /", src)
		}
		for _, n := range names {
			it := copyItem{src: n}
			switch {
			case c.isDir(n):
				it.dir = cp.Dst
			case cp.DstIsDir:
				it.dir, it.asName = cp.Dst, path.Base(n)
			default:
				it.dir, it.asName = path.Dir(cp.Dst), path.Base(cp.Dst)
			}
			items = append(items, it)
			fmt.Fprintf(h, "item %s %s %s\n", it.src, it.dir, it.asName)
			for _, e := range c.under(n) {
				fmt.Fprintf(h, "%s %o %c %s %s\n", e.hdr.Name, e.hdr.Mode, e.hdr.Typeflag, e.hdr.Linkname, e.sum)
			}
		}
	}
	return items, hex.EncodeToString(h.Sum(nil)), nil
}

// under returns the entries of name and beneath it, in name order.
func (c *buildContext) under(name string) []*ctxEntry {
	var out []*ctxEntry
	if e := c.entries[name]; e != nil {
		out = append(out, e)
	}
	prefix := name + "/"
	if name == "." {
		prefix = ""
	}
	i, _ := slices.BinarySearch(c.names, prefix)
	for ; i < len(c.names) && strings.HasPrefix(c.names[i], prefix); i++ {
		if c.names[i] != name {
			out = append(out, c.entries[c.names[i]])
		}
	}
	return out
}

// writeTar writes item's entries as a tar archive for its dir: owned by
// root (docker's COPY: --chown changes it after), names relative to dir.
func (c *buildContext) writeTar(w io.Writer, it copyItem) error {
	tw := tar.NewWriter(w)
	for _, e := range c.under(it.src) {
		hdr := e.hdr
		rel := strings.TrimPrefix(strings.TrimPrefix(hdr.Name, it.src), "/")
		if it.src == "." {
			rel = hdr.Name
		}
		switch {
		case it.asName != "" && rel == "":
			rel = it.asName
		case it.asName != "":
			rel = it.asName + "/" + rel
		case rel == "":
			continue // the source directory itself: its contents go into dir
		}
		hdr.Name = rel
		if hdr.Typeflag == tar.TypeDir {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.Format = tar.FormatPAX
		hdr.PAXRecords = nil
		if err := tw.WriteHeader(&hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, io.NewSectionReader(c.f, e.off, e.size)); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}
