package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strconv"

	"github.com/berth-sh/berth/api"
)

func filesPath(id string) string { return sandboxPath(id, "files") }

// ReadFile streams the contents of the file at path inside the sandbox to w
// and returns its mode (as the daemon reports it) and the bytes written.
func (c *Client) ReadFile(ctx context.Context, id, path string, w io.Writer) (fs.FileMode, int64, error) {
	req, err := c.newRequest(ctx, http.MethodGet, filesPath(id), url.Values{"path": {path}}, nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := c.send(req)
	if err != nil {
		return 0, 0, err
	}
	defer closeBody(resp.Body)
	var mode fs.FileMode
	if m, err := strconv.ParseUint(resp.Header.Get(FileModeHeader), 8, 32); err == nil {
		mode = fs.FileMode(m)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return mode, n, fmt.Errorf("read %s: %w", path, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return mode, n, fmt.Errorf("read %s: got %d of %d bytes", path, n, resp.ContentLength)
	}
	return mode, n, nil
}

// WriteFile creates or replaces the file at path inside the sandbox with the
// contents of r. mode sets the permission bits (0 lets the daemon choose).
func (c *Client) WriteFile(ctx context.Context, id, path string, mode fs.FileMode, r io.Reader) (*api.FileInfo, error) {
	return c.WriteFileWith(ctx, id, path, mode, r, WriteOptions{})
}

// WriteOptions say who owns what a write creates. By default it is the
// sandbox's user (root if it has none).
type WriteOptions struct {
	// User owns it instead: "uid[:gid]" or a name of the sandbox's
	// /etc/passwd.
	User string
	// PreserveOwner (tar uploads and copies into a sandbox): each entry
	// keeps the archive's uid and gid, as the sandbox sees ids.
	PreserveOwner bool
}

func (o WriteOptions) query(q url.Values) url.Values {
	if o.User != "" {
		q.Set("user", o.User)
	}
	if o.PreserveOwner {
		q.Set("preserve_owner", "true")
	}
	return q
}

// WriteFileWith is WriteFile with the file owned as o says.
func (c *Client) WriteFileWith(ctx context.Context, id, path string, mode fs.FileMode, r io.Reader, o WriteOptions) (*api.FileInfo, error) {
	q := o.query(url.Values{"path": {path}})
	if mode != 0 {
		q.Set("mode", fmt.Sprintf("%04o", uint32(mode.Perm()|mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))))
	}
	if r == nil {
		r = http.NoBody
	}
	req, err := c.newRequest(ctx, http.MethodPut, filesPath(id), q, r)
	if err != nil {
		return nil, err
	}
	setContentLength(req, r)
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	defer closeBody(resp.Body)
	var fi api.FileInfo
	if resp.StatusCode == http.StatusNoContent {
		return &fi, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(&fi); err != nil {
		return nil, fmt.Errorf("decode file info: %w", err)
	}
	return &fi, nil
}

// ReadTar streams a tar archive of the file or directory at path inside the
// sandbox to w.
func (c *Client) ReadTar(ctx context.Context, id, path string, w io.Writer) error {
	req, err := c.newRequest(ctx, http.MethodGet, filesPath(id), url.Values{"path": {path}, "format": {"tar"}}, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/x-tar")
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer closeBody(resp.Body)
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("read archive of %s: %w", path, err)
	}
	return nil
}

// WriteTar extracts the tar archive read from r into the directory dir
// inside the sandbox.
func (c *Client) WriteTar(ctx context.Context, id, dir string, r io.Reader) error {
	return c.WriteTarWith(ctx, id, dir, r, WriteOptions{})
}

// WriteTarWith is WriteTar with what it creates owned as o says.
func (c *Client) WriteTarWith(ctx context.Context, id, dir string, r io.Reader, o WriteOptions) error {
	req, err := c.newRequest(ctx, http.MethodPut, filesPath(id), o.query(url.Values{"path": {dir}, "format": {"tar"}}), r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	setContentLength(req, r)
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	closeBody(resp.Body)
	return nil
}

// Stat describes the file at path inside the sandbox (symlinks are not
// followed).
func (c *Client) Stat(ctx context.Context, id, path string) (*api.FileInfo, error) {
	var fi api.FileInfo
	if err := c.do(ctx, http.MethodGet, filesPath(id)+"/stat", url.Values{"path": {path}}, nil, &fi); err != nil {
		return nil, err
	}
	return &fi, nil
}

// List describes the entries of the directory at path inside the sandbox.
func (c *Client) List(ctx context.Context, id, path string) ([]api.FileInfo, error) {
	fis := []api.FileInfo{}
	if err := c.do(ctx, http.MethodGet, filesPath(id)+"/list", url.Values{"path": {path}}, nil, &fis); err != nil {
		return nil, err
	}
	if fis == nil {
		fis = []api.FileInfo{}
	}
	return fis, nil
}

// Mkdir creates the directory path inside the sandbox; with parents, missing
// parents are created and an existing directory is not an error.
func (c *Client) Mkdir(ctx context.Context, id, path string, parents bool) error {
	q := url.Values{"path": {path}}
	if parents {
		q.Set("parents", "true")
	}
	return c.do(ctx, http.MethodPost, filesPath(id)+"/mkdir", q, nil, nil)
}

// Remove deletes the file or empty directory at path inside the sandbox;
// with recursive, a directory is removed with its contents.
func (c *Client) Remove(ctx context.Context, id, path string, recursive bool) error {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	return c.do(ctx, http.MethodDelete, filesPath(id), q, nil, nil)
}

// setContentLength sends a Content-Length for regular files, which
// http.NewRequest only does for in-memory readers, so the daemon can reject
// an oversized upload before reading it.
func setContentLength(req *http.Request, r io.Reader) {
	if req.ContentLength > 0 {
		return
	}
	f, ok := r.(*os.File)
	if !ok {
		return
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return
	}
	off, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return
	}
	req.ContentLength = fi.Size() - off
}

// Move renames the file or directory src inside the sandbox to dst by
// rename(2)'s rules: a file replaces a file, a directory an empty
// directory; symlinks are moved, never followed. With noReplace an
// existing dst is a conflict.
func (c *Client) Move(ctx context.Context, id, src, dst string, noReplace bool) error {
	q := url.Values{"path": {src}, "to": {dst}}
	if noReplace {
		q.Set("no_replace", "true")
	}
	return c.do(ctx, http.MethodPost, filesPath(id)+"/move", q, nil, nil)
}

// Watch streams the changes under the directory path inside the sandbox
// (its subtree with recursive) to each, from the "ready" event on, until
// ctx ends (nil), each fails (its error), or the stream ends: "end" (nil)
// or "error" (that error).
func (c *Client) Watch(ctx context.Context, id, path string, recursive bool, each func(api.WatchEvent) error) error {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	req, err := c.newRequest(ctx, http.MethodGet, filesPath(id)+"/watch", q, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer closeBody(resp.Body)
	dec := json.NewDecoder(resp.Body)
	for {
		var ev api.WatchEvent
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if err == io.EOF {
				return fmt.Errorf("watch %s: the stream ended without an end event", path)
			}
			return fmt.Errorf("watch %s: %w", path, err)
		}
		switch ev.Type {
		case api.WatchEnd:
			return nil
		case api.WatchError:
			if ev.Error != nil {
				return apiError(ev.Error)
			}
			return fmt.Errorf("watch %s failed", path)
		}
		if err := each(ev); err != nil {
			return err
		}
	}
}
