package e2b

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	pathpkg "path"
	"strings"

	"connectrpc.com/connect"

	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/e2b/envdpb/filesystem/filesystemconnect"
	"github.com/berth-sh/berth/internal/e2b/envdpb/process/processconnect"
	"github.com/berth-sh/berth/internal/errdefs"
)

// The rules of envd's calls: the sandbox's own lease token, with the
// scope of what it does.
var (
	ruleExec  = auth.Rule{Scopes: []auth.Scope{auth.ScopeExec}, Lease: true}
	ruleFiles = auth.Rule{Scopes: []auth.Scope{auth.ScopeFiles}, Lease: true}
	rulePorts = auth.Rule{Scopes: []auth.Scope{auth.ScopePorts}, Lease: true}
)

// maxUpload bounds one /files upload; maxRPCMessage one Connect message.
const (
	maxUpload     = 1 << 30
	maxRPCMessage = 4 << 20
)

type principalKey struct{}

func principalOf(ctx context.Context) auth.Principal {
	p, _ := ctx.Value(principalKey{}).(auth.Principal)
	return p
}

// envdRoutes is envd: the Connect services and the plain HTTP routes.
func (d *Door) envdRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	// A message is bounded (stdin chunks and paths are small; the SDK
	// sends files over /files), so no caller makes the daemon buffer more.
	limit := connect.WithReadMaxBytes(maxRPCMessage)
	ppath, ph := processconnect.NewProcessHandler(&processService{d: d}, limit)
	fpath, fh := filesystemconnect.NewFilesystemHandler(&filesystemService{d: d}, limit)
	mux.Handle(ppath, d.envdAuth(ruleExec, true, ph))
	mux.Handle(fpath, d.envdAuth(ruleFiles, true, fh))
	mux.Handle("GET /files", d.envdAuth(ruleFiles, false, http.HandlerFunc(d.download)))
	mux.Handle("POST /files", d.envdAuth(ruleFiles, false, http.HandlerFunc(d.upload)))
	mux.Handle("GET /health", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// E2B's health check carries no token: it says whether the
		// sandbox answers, nothing about it.
		if _, err := d.cfg.Manager.Get(context.WithoutCancel(r.Context()), targetOf(r.Context()).Sandbox); err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, d.cfg.Log, errdefs.NotFound("envd has no route %s %s", r.Method, r.URL.Path))
	}))
	return mux
}

// envdAuth admits a call only with the target sandbox's own lease token
// (X-Access-Token) holding rule's scopes: a token of sandbox A naming
// sandbox B in its host or headers is refused.
func (d *Door) envdAuth(rule auth.Rule, rpc bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := targetOf(r.Context())
		tok := r.Header.Get("X-Access-Token")
		p, err := d.cfg.Server.Credential(r.Context(), tok, rule, t.Sandbox)
		if err == nil && !p.IsLease() {
			err = errdefs.Permission("envd takes the sandbox's access token (envdAccessToken)")
		}
		if err != nil {
			if rpc {
				w.Header().Set("Connection", "close")
				_ = connect.NewErrorWriter().Write(w, r, connectError(err))
				return
			}
			writeError(w, d.cfg.Log, err)
			return
		}
		ctx := context.WithValue(d.cfg.WithCaller(r.Context(), p), principalKey{}, p)
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// connectError turns an error of berth's categories into a Connect error.
func connectError(err error) *connect.Error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	code := connect.CodeInternal
	switch statusOf(err) {
	case 400:
		code = connect.CodeInvalidArgument
	case 401:
		code = connect.CodeUnauthenticated
	case 403:
		code = connect.CodePermissionDenied
	case 404:
		code = connect.CodeNotFound
	case 409:
		code = connect.CodeFailedPrecondition
	case 413, 429, 507:
		code = connect.CodeResourceExhausted
	case 503:
		code = connect.CodeUnavailable
	}
	if code == connect.CodeInternal {
		return connect.NewError(code, errors.New("internal error"))
	}
	return connect.NewError(code, err)
}

// userOf is the exec user a call names: the SDK's Basic authorization
// header carries "username:" (no header: the sandbox's default user).
func userOf(h http.Header) (string, error) {
	v := h.Get("Authorization")
	if v == "" {
		return "", nil
	}
	enc, ok := strings.CutPrefix(v, "Basic ")
	if !ok {
		return "", errdefs.Invalid("Authorization: want Basic with the user name")
	}
	b, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return "", errdefs.Invalid("Authorization: bad base64")
	}
	user, _, _ := strings.Cut(string(b), ":")
	return checkUser(user)
}

// checkUser accepts a user name as passwd writes them.
func checkUser(user string) (string, error) {
	if len(user) > 32 {
		return "", errdefs.Invalid("user name too long")
	}
	for i := range len(user) {
		c := user[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return "", errdefs.Invalid("bad user name %q", user)
		}
	}
	return user, nil
}

// homeOf is the directory a relative path of user is under.
func homeOf(user string) string {
	switch user {
	case "", "root":
		return "/root"
	}
	return "/home/" + user
}

// absPath resolves p as envd does: relative to the user's home.
func absPath(p, user string) (string, error) {
	if p == "" {
		return "", errdefs.Invalid("path is required")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", errdefs.Invalid("path has a NUL byte")
	}
	if strings.HasPrefix(p, "~/") || p == "~" {
		p = homeOf(user) + strings.TrimPrefix(p, "~")
	}
	if !strings.HasPrefix(p, "/") {
		p = homeOf(user) + "/" + p
	}
	return pathpkg.Clean(p), nil
}

// fileUser reads the username query of /files.
func fileUser(r *http.Request) (string, error) {
	if u := r.URL.Query().Get("username"); u != "" {
		return checkUser(u)
	}
	return userOf(r.Header)
}

func (d *Door) download(w http.ResponseWriter, r *http.Request) {
	ctx, p := r.Context(), principalOf(r.Context())
	user, err := fileUser(r)
	if err != nil {
		writeError(w, d.cfg.Log, err)
		return
	}
	path, err := absPath(r.URL.Query().Get("path"), user)
	if err != nil {
		writeError(w, d.cfg.Log, err)
		return
	}
	f, err := d.cfg.Manager.Files(ctx, targetOf(ctx).Sandbox, false, p.Actor)
	if err != nil {
		writeError(w, d.cfg.Log, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat(ctx, path)
	if err != nil {
		writeError(w, d.cfg.Log, err)
		return
	}
	if fi.IsDir {
		writeError(w, d.cfg.Log, errdefs.Invalid("%s is a directory", path))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": pathpkg.Base(path)}))
	if _, err := f.ReadFile(ctx, path, w); err != nil {
		d.cfg.Log.Warn("e2b download cut short", "sandbox", targetOf(ctx).Sandbox, "err", err)
	}
}

// writtenInfo is envd's answer for one written file.
type writtenInfo struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// upload writes files: one octet-stream body to ?path, or multipart
// parts named "file" (each to ?path, or to its filename when no path is
// given); parents are made.
func (d *Door) upload(w http.ResponseWriter, r *http.Request) {
	ctx, p := r.Context(), principalOf(r.Context())
	user, err := fileUser(r)
	if err != nil {
		writeError(w, d.cfg.Log, err)
		return
	}
	qpath := r.URL.Query().Get("path")
	f, err := d.cfg.Manager.Files(ctx, targetOf(ctx).Sandbox, true, p.Actor)
	if err != nil {
		writeError(w, d.cfg.Log, err)
		return
	}
	defer f.Close()
	put := func(name string, body io.Reader) (writtenInfo, error) {
		path, err := absPath(name, user)
		if err != nil {
			return writtenInfo{}, err
		}
		if err := f.Mkdir(ctx, pathpkg.Dir(path), 0o755, true, p.Actor); err != nil && !errors.Is(err, errdefs.ErrConflict) {
			return writtenInfo{}, err
		}
		if _, err := f.WriteFile(ctx, path, 0o644, body, p.Actor); err != nil {
			return writtenInfo{}, err
		}
		return writtenInfo{Name: pathpkg.Base(path), Type: "file", Path: path}, nil
	}
	body := http.MaxBytesReader(w, r.Body, maxUpload)
	var out []writtenInfo
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "multipart/form-data" {
		mr := multipart.NewReader(body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				writeError(w, d.cfg.Log, errdefs.Invalid("multipart body: %v", err))
				return
			}
			if part.FormName() != "file" {
				part.Close()
				continue
			}
			name := qpath
			if name == "" {
				name = part.FileName()
			}
			wi, err := put(name, part)
			part.Close()
			if err != nil {
				writeError(w, d.cfg.Log, err)
				return
			}
			out = append(out, wi)
		}
	} else {
		if r.Header.Get("Content-Encoding") != "" {
			writeError(w, d.cfg.Log, errdefs.Invalid("Content-Encoding %q is not supported", r.Header.Get("Content-Encoding")))
			return
		}
		wi, err := put(qpath, body)
		if err != nil {
			writeError(w, d.cfg.Log, err)
			return
		}
		out = append(out, wi)
	}
	if len(out) == 0 {
		writeError(w, d.cfg.Log, errdefs.Invalid("no file in the upload"))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// proxy sends a request for a sandbox's own port through berth's port
// proxy, with the sandbox's token (X-Access-Token or E2B's traffic token
// header) holding the ports scope.
func (d *Door) proxy(w http.ResponseWriter, r *http.Request, t Target) {
	tok := r.Header.Get("X-Access-Token")
	if tok == "" {
		tok = r.Header.Get("E2b-Traffic-Access-Token")
	}
	p, err := d.cfg.Server.Credential(r.Context(), tok, rulePorts, t.Sandbox)
	if err == nil && !p.IsLease() {
		err = errdefs.Permission("a sandbox port takes the sandbox's access token")
	}
	if err != nil {
		writeError(w, d.cfg.Log, err)
		return
	}
	r = r.WithContext(d.cfg.WithCaller(r.Context(), p))
	for _, h := range []string{"X-Access-Token", "E2b-Traffic-Access-Token", "E2b-Sandbox-Id", "E2b-Sandbox-Port"} {
		r.Header.Del(h)
	}
	d.cfg.Server.ProxyPort(w, r, t.Sandbox, t.Port, r.URL.Path)
}
