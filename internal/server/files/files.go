// Package files serves the file routes of a sandbox: read and write a
// file or a tar stream, stat, list, mkdir, remove, move and watch, and
// the export and sandbox-to-sandbox copy. The routes are mounted by the
// root package server's route table.
package files

import (
	"context"
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/berth-sh/berth/internal/access"
	enginefiles "github.com/berth-sh/berth/internal/engine/files"
	"github.com/berth-sh/berth/internal/engine/snapshots"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/convert"
	"github.com/berth-sh/berth/internal/server/rest"
)

// Engine is what the file routes need of the engine.
type Engine interface {
	Files(ctx context.Context, ref string, write bool, actor string) (*enginefiles.Files, error)
	Export(ctx context.Context, ref string, paths []string, w io.Writer, actor string) error
	Copy(ctx context.Context, req *snapshots.CopyRequest, actor string) error
}

// Handlers serves the file routes.
type Handlers struct {
	E Engine
}

func pathParam(r *http.Request) (string, error) { return pathParamNamed(r, "path") }

// pathParamNamed reads the required path query parameter name: at most
// sandbox.MaxFilePathBytes bytes, no control characters.
func pathParamNamed(r *http.Request, name string) (string, error) {
	p := r.URL.Query().Get(name)
	if p == "" {
		return "", errdefs.Invalid("%s query parameter is required", name)
	}
	if err := sandbox.CheckFilePath(name, p); err != nil { // the E2B door's rule too
		return "", err
	}
	return p, nil
}

func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errdefs.Invalid("%s must be true or false", name)
	}
	return b, nil
}

func modeParam(r *http.Request, def os.FileMode) (os.FileMode, error) {
	v := r.URL.Query().Get("mode")
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(v, 8, 32)
	if err != nil || n > 0o7777 {
		return 0, errdefs.Invalid("mode must be octal permission bits such as 0644")
	}
	return os.FileMode(n), nil
}

func formatParam(r *http.Request) (tar bool, err error) {
	switch f := r.URL.Query().Get("format"); f {
	case "", "raw":
		return false, nil
	case "tar":
		return true, nil
	default:
		return false, errdefs.Invalid("format must be raw or tar, got %q", f)
	}
}

// Get serves GET /v1/sandboxes/{id}/files.
func (h *Handlers) Get(w http.ResponseWriter, r *http.Request) {
	path, err := pathParam(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	asTar, err := formatParam(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	f, err := h.E.Files(r.Context(), r.PathValue("id"), false, rest.Actor(r))
	if err != nil {
		rest.Error(w, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat(r.Context(), path)
	if err != nil {
		rest.Error(w, err)
		return
	}
	if asTar {
		w.Header().Set("Content-Type", "application/x-tar")
		err = f.ReadTar(r.Context(), path, w)
	} else {
		if fi.IsDir {
			rest.Error(w, errdefs.Invalid("%s is a directory; ask for format=tar", path))
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-Berth-File-Mode", strconv.FormatUint(uint64(os.FileMode(fi.Mode).Perm()), 8))
		w.Header().Set("X-Berth-File-Size", strconv.FormatInt(fi.Size, 10))
		_, err = f.ReadFile(r.Context(), path, w)
	}
	if err != nil {
		if !rest.HeaderWritten(w) {
			rest.Error(w, err)
			return
		}
		// Mid-stream: abort the response so the client sees a broken
		// transfer rather than a short file.
		panic(http.ErrAbortHandler)
	}
}

// Put serves PUT /v1/sandboxes/{id}/files.
func (h *Handlers) Put(w http.ResponseWriter, r *http.Request) {
	path, err := pathParam(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	asTar, err := formatParam(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	mode, err := modeParam(r, 0o644)
	if err != nil {
		rest.Error(w, err)
		return
	}
	own, err := ownershipParams(r, asTar)
	if err != nil {
		rest.Error(w, err)
		return
	}
	f, err := h.E.Files(r.Context(), r.PathValue("id"), true, rest.Actor(r))
	if err != nil {
		rest.Error(w, err)
		return
	}
	defer f.Close()
	if !own.Preserve {
		own.Owner = f.Owner(own.Owner)
	}
	if asTar {
		if err := f.WriteTarAs(r.Context(), path, r.Body, own, rest.Actor(r)); err != nil {
			rest.Error(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	// One file's bytes: the gate's bound, as on every door's write.
	body, err := access.FileWriteBody(r.Body, r.ContentLength)
	if err != nil {
		rest.Error(w, err)
		return
	}
	fi, err := f.WriteFileAs(r.Context(), path, mode, body, own, rest.Actor(r))
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, convert.FileInfoToAPI(fi))
}

// ownershipParams reads who owns what a write creates: user= (a user of
// the sandbox, "uid[:gid]" or a name; default the sandbox's user) or,
// for a tar, preserve_owner=true (the archive's owners).
func ownershipParams(r *http.Request, asTar bool) (enginefiles.Ownership, error) {
	user := r.URL.Query().Get("user")
	if len(user) > 256 {
		return enginefiles.Ownership{}, errdefs.Invalid("user: at most 256 bytes")
	}
	if err := sandbox.CheckText("user", user); err != nil {
		return enginefiles.Ownership{}, err
	}
	preserve, err := boolParam(r, "preserve_owner")
	if err != nil {
		return enginefiles.Ownership{}, err
	}
	if preserve && !asTar {
		return enginefiles.Ownership{}, errdefs.Invalid("preserve_owner applies to a tar upload (format=tar)")
	}
	if preserve && user != "" {
		return enginefiles.Ownership{}, errdefs.Invalid("preserve_owner and user do not go together")
	}
	return enginefiles.Ownership{Owner: user, Preserve: preserve}, nil
}

// Stat serves GET /v1/sandboxes/{id}/files/stat.
func (h *Handlers) Stat(w http.ResponseWriter, r *http.Request) {
	f, path, ok := h.openFiles(w, r, false)
	if !ok {
		return
	}
	defer f.Close()
	fi, err := f.Stat(r.Context(), path)
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, convert.FileInfoToAPI(fi))
}

// List serves GET /v1/sandboxes/{id}/files/list.
func (h *Handlers) List(w http.ResponseWriter, r *http.Request) {
	f, path, ok := h.openFiles(w, r, false)
	if !ok {
		return
	}
	defer f.Close()
	fis, err := f.List(r.Context(), path)
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, convert.Slice(fis, convert.FileInfoToAPI))
}

// Mkdir serves POST /v1/sandboxes/{id}/files/mkdir.
func (h *Handlers) Mkdir(w http.ResponseWriter, r *http.Request) {
	path, err := pathParam(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	parents, err := boolParam(r, "parents")
	if err != nil {
		rest.Error(w, err)
		return
	}
	mode, err := modeParam(r, 0o755)
	if err != nil {
		rest.Error(w, err)
		return
	}
	f, err := h.E.Files(r.Context(), r.PathValue("id"), true, rest.Actor(r))
	if err != nil {
		rest.Error(w, err)
		return
	}
	defer f.Close()
	// Owned as a user's write is: by the sandbox's user, so its own
	// processes can write into what the API made.
	if err := f.MkdirAs(r.Context(), path, mode, parents, f.Owner(""), rest.Actor(r)); err != nil {
		rest.Error(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// Remove serves DELETE /v1/sandboxes/{id}/files.
func (h *Handlers) Remove(w http.ResponseWriter, r *http.Request) {
	path, err := pathParam(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	recursive, err := boolParam(r, "recursive")
	if err != nil {
		rest.Error(w, err)
		return
	}
	f, err := h.E.Files(r.Context(), r.PathValue("id"), true, rest.Actor(r))
	if err != nil {
		rest.Error(w, err)
		return
	}
	defer f.Close()
	if err := f.Remove(r.Context(), path, recursive, rest.Actor(r)); err != nil {
		rest.Error(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// openFiles parses the path parameter and opens file access to the
// sandbox for a handler; on failure it has answered and returns false.
func (h *Handlers) openFiles(w http.ResponseWriter, r *http.Request, write bool) (*enginefiles.Files, string, bool) {
	path, err := pathParam(r)
	if err != nil {
		rest.Error(w, err)
		return nil, "", false
	}
	f, err := h.E.Files(r.Context(), r.PathValue("id"), write, rest.Actor(r))
	if err != nil {
		rest.Error(w, err)
		return nil, "", false
	}
	return f, path, true
}
