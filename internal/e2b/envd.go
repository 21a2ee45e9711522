package e2b

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	pathpkg "path"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/berth-sh/berth/internal/access"
	"github.com/berth-sh/berth/internal/agent/wire"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/e2b/envdpb/filesystem/filesystemconnect"
	"github.com/berth-sh/berth/internal/e2b/envdpb/process/processconnect"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/files"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
)

// maxUpload bounds one /files upload's body: one file of the gate's
// bound (access.MaxFileWriteBytes, which each file meets, inflated or
// not) and its multipart framing. maxRPCMessage bounds one Connect
// message.
const (
	maxUpload     = access.MaxFileWriteBytes + 1<<20
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
	watch := connect.WithInterceptors(rpcWatch{})
	ppath, ph := processconnect.NewProcessHandler(&processService{d: d}, limit, watch)
	fpath, fh := filesystemconnect.NewFilesystemHandler(&filesystemService{d: d}, limit, watch)
	ph, fh = d.rpcRefusals(ph), d.rpcRefusals(fh)
	// Each service is admitted with the operation its calls share the
	// rule of (the sandbox's own token, with exec or files); a call that
	// writes is that operation of its own (audited).
	mux.Handle(ppath, d.envdAuth(access.ProcessRead, true, ph))
	mux.Handle(fpath, d.envdAuth(access.FilesRead, true, fh))
	mux.Handle("GET /files", d.envdAuth(access.FilesRead, false, http.HandlerFunc(d.download)))
	mux.Handle("POST /files", d.envdAuth(access.FilesWrite, false, http.HandlerFunc(d.upload)))
	mux.Handle("GET /health", http.HandlerFunc(d.health))
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, d.cfg.Log, errdefs.NotFound("envd has no route %s %s", r.Method, r.URL.Path))
	}))
	return mux
}

// health is envd's health check, which the SDK's isRunning reads: 204
// while the sandbox runs, 502 when it does not (paused, stopped, killed).
// Only the sandbox's own live access token learns that it runs: without
// one — no token, another sandbox's, a revoked one, an id that names
// nothing or another tenant's sandbox — the answer is 502 whatever the
// sandbox is, so the route tells a stranger nothing about which ids exist.
func (d *Door) health(w http.ResponseWriter, r *http.Request) {
	id := targetOf(r.Context()).Sandbox
	p, err := d.cfg.Server.Credential(r.Context(), r.Header.Get("X-Access-Token"), access.SandboxGet, access.Target{Sandbox: id})
	if err != nil || !p.IsLease() {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	sb, err := d.cfg.Manager.Get(d.cfg.WithCaller(context.WithoutCancel(r.Context()), p), id)
	if err != nil || sb.State != sandbox.StateRunning {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// envdAuth admits a call only with the target sandbox's own lease token
// (X-Access-Token) that op's rule lets in: a token of sandbox A naming
// sandbox B in its host or headers is refused.
func (d *Door) envdAuth(op access.Op, rpc bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := targetOf(r.Context())
		tok := r.Header.Get("X-Access-Token")
		var err error
		if tok == "" && !rpc {
			// A signed file URL (signing.go) stands for the token
			// that signed it.
			tok, err = d.signedToken(r, t.Sandbox)
		}
		var p auth.Principal
		if err == nil {
			p, err = d.cfg.Server.Credential(r.Context(), tok, op, access.Target{Sandbox: t.Sandbox})
		}
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
		// A stream (process output, a watch, a download) ends with the
		// token that opened it.
		ctx, release := d.cfg.Server.Bind(r.Context(), p)
		defer release()
		ctx = context.WithValue(d.cfg.WithCaller(ctx, p), principalKey{}, p)
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// rpcOps are the envd procedures that are recorded operations of their
// own (each the operation its handler hands the gate).
var rpcOps = map[string]access.Op{
	processconnect.ProcessStartProcedure:         access.ProcessStart,
	processconnect.ProcessSendInputProcedure:     access.ProcessStdin,
	processconnect.ProcessStreamInputProcedure:   access.ProcessStdin,
	processconnect.ProcessCloseStdinProcedure:    access.ProcessStdin,
	processconnect.ProcessSendSignalProcedure:    access.ProcessSignal,
	filesystemconnect.FilesystemMakeDirProcedure: access.FilesMkdir,
	filesystemconnect.FilesystemMoveProcedure:    access.FilesMove,
	filesystemconnect.FilesystemRemoveProcedure:  access.FilesRemove,
}

// rpcState is what rpcWatch saw of one call: whether its first message
// was read, and the error that refused it if it was not.
type rpcState struct {
	decoded bool
	refused error
}

type rpcStateKey struct{}

// rpcRefusals puts an envd call that connect-go refused before the door's
// handler ran (its message does not decode, is too large, or the call is
// not one the protocol takes) through the gate as the procedure's
// operation, which records REST's refusal of an invalid request of it
// ("error 400"); connect-go has answered it (invalid_argument). The
// caller was admitted by envdAuth with the rule every recorded procedure
// of its service shares, so the gate's decision is the same.
func (d *Door) rpcRefusals(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op, ok := rpcOps[r.URL.Path]
		if !ok {
			h.ServeHTTP(w, r)
			return
		}
		st := &rpcState{}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), rpcStateKey{}, st)))
		if st.decoded {
			return
		}
		why := errdefs.Invalid("the request message was refused before it was read")
		if st.refused != nil {
			why = errdefs.Invalid("the request message: %s", connect.CodeOf(st.refused).String()+": "+errMessage(st.refused))
		}
		ctx := r.Context()
		_ = d.auditedFrom(ctx, r.RemoteAddr, principalOf(ctx), op, targetOf(ctx).Sandbox,
			func() (access.Validator, error) { return nil, why }, func() error { return nil })
	})
}

// errMessage is a Connect error's message without its code.
func errMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// rpcWatch tells rpcRefusals whether a call's first message was read:
// a unary call's interceptor runs once it was; a stream's first Receive
// says.
type rpcWatch struct{}

func (rpcWatch) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if st, ok := ctx.Value(rpcStateKey{}).(*rpcState); ok {
			st.decoded = true
		}
		return next(ctx, req)
	}
}

func (rpcWatch) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (rpcWatch) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if st, ok := ctx.Value(rpcStateKey{}).(*rpcState); ok {
			conn = &watchedConn{StreamingHandlerConn: conn, st: st}
		}
		return next(ctx, conn)
	}
}

// watchedConn notes the outcome of a stream's first Receive.
type watchedConn struct {
	connect.StreamingHandlerConn
	st    *rpcState
	first bool
}

func (c *watchedConn) Receive(m any) error {
	err := c.StreamingHandlerConn.Receive(m)
	if !c.first {
		c.first = true
		if code := connect.CodeOf(err); err != nil && (code == connect.CodeInvalidArgument || code == connect.CodeResourceExhausted) {
			c.st.refused = err // a message that does not decode, or is too large
		} else {
			c.st.decoded = true // read, none sent, or the caller went away
		}
	}
	return err
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

// defaultUser is the user a call that names none acts as: the target
// sandbox's default user when that is a name (E2B's "user" for a sandbox
// the door made from a builtin template), else "" (root).
func (d *Door) defaultUser(ctx context.Context, named string) string {
	if named != "" {
		return named
	}
	sb, err := d.cfg.Manager.Get(ctx, targetOf(ctx).Sandbox)
	if err != nil {
		return ""
	}
	u, err := checkUser(sb.Spec.User)
	if err != nil || u == "" || u == "root" || (u[0] >= '0' && u[0] <= '9') {
		return ""
	}
	return u
}

// absPath resolves p as envd does: relative to the user's home.
func absPath(p, user string) (string, error) {
	// The REST file routes' rule: given, within PATH_MAX, no control
	// characters.
	if err := sandbox.CheckFilePath("path", p); err != nil {
		return "", err
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
	user = d.defaultUser(ctx, user)
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
	var out io.Writer = w
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		// The SDK's read({gzip: true}).
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Add("Vary", "Accept-Encoding")
		zw := gzip.NewWriter(w)
		defer zw.Close()
		out = zw
	}
	if _, err := f.ReadFile(ctx, path, out); err != nil {
		d.cfg.Log.Warn("e2b download cut short", "sandbox", targetOf(ctx).Sandbox, "err", err)
	}
}

// acceptsGzip reports whether an Accept-Encoding header asks for gzip
// (and does not refuse it with q=0).
func acceptsGzip(h string) bool {
	for _, part := range strings.Split(h, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") {
			q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
			return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
		}
	}
	return false
}

// writtenInfo is envd's answer for one written file.
type writtenInfo struct {
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Path     string            `json:"path"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// maxMaskHost bounds maskRequestHost (a host name and a port).
const maxMaskHost = 260

// checkMaskHost accepts a maskRequestHost: a host[:port] of letters,
// digits, '.', '-', '_' and ':' (IPv6 in brackets), where "${PORT}" stands
// for the port asked — nothing that could end the header or start another.
func checkMaskHost(m string) error {
	if m == "" || len(m) > maxMaskHost {
		return errdefs.Invalid("network maskRequestHost: want a host[:port] of at most %d bytes", maxMaskHost)
	}
	rest := strings.ReplaceAll(m, "${PORT}", "1")
	for i := range len(rest) {
		c := rest[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(".-_:[]", c) >= 0) {
			return errdefs.Invalid("network maskRequestHost %q: want a host[:port] (${PORT} for the port)", m)
		}
	}
	return nil
}

// File metadata (envd 0.6.2): an upload's X-Metadata-KEY: VALUE headers
// are kept as the written file's user xattrs user.e2b.key (the key
// lower-cased: header names are case-insensitive), and every user.e2b.*
// xattr of a file, however it was set, is its metadata in stat, list and
// the upload's answer. A write replaces the file, so an overwrite without
// metadata leaves none; a rename keeps it.
const (
	metadataHeader = "X-Metadata-"
	metadataXattr  = "user.e2b."
)

// metadataOf reads an upload's metadata headers as xattrs. Keys are HTTP
// tokens, values printable ASCII (the SDK's own rules), within the
// agent's bounds (which it checks again).
func metadataOf(h http.Header) (map[string]string, error) {
	var x map[string]string
	for name, vals := range h {
		if len(name) <= len(metadataHeader) || !strings.EqualFold(name[:len(metadataHeader)], metadataHeader) {
			continue
		}
		key := strings.ToLower(name[len(metadataHeader):])
		if len(vals) != 1 {
			return nil, errdefs.Invalid("metadata %q given %d times", key, len(vals))
		}
		for i := range len(key) {
			if !isTokenChar(key[i]) {
				return nil, errdefs.Invalid("metadata key %q: want HTTP token characters", key)
			}
		}
		for i := range len(vals[0]) {
			if c := vals[0][i]; c < 0x20 || c > 0x7e {
				return nil, errdefs.Invalid("metadata %q: the value must be printable ASCII", key)
			}
		}
		if x == nil {
			x = map[string]string{}
		}
		x[metadataXattr+key] = vals[0]
	}
	if len(x) > wire.MaxXattrs {
		return nil, errdefs.Invalid("more than %d metadata keys", wire.MaxXattrs)
	}
	total := 0
	for k, v := range x {
		if len(k) > 255 {
			return nil, errdefs.Invalid("metadata key %q too long", k[len(metadataXattr):])
		}
		total += len(k) + len(v)
	}
	if total > wire.MaxXattrBytes {
		return nil, errdefs.Invalid("metadata over %d bytes", wire.MaxXattrBytes)
	}
	return x, nil
}

func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// metadataFrom is a file's E2B metadata: its user.e2b.* xattrs, the
// prefix cut (nil when it has none).
func metadataFrom(x map[string]string) map[string]string {
	var m map[string]string
	for k, v := range x {
		if key, ok := strings.CutPrefix(k, metadataXattr); ok && key != "" {
			if m == nil {
				m = map[string]string{}
			}
			m[key] = v
		}
	}
	return m
}

// upload writes files: one octet-stream body to ?path, or multipart
// parts named "file" (each to ?path, or to its filename when no path is
// given); parents are made.
func (d *Door) upload(w http.ResponseWriter, r *http.Request) {
	ctx, p := r.Context(), principalOf(r.Context())
	var out []writtenInfo
	err := d.audited(ctx, r.RemoteAddr, p, access.FilesWrite, targetOf(ctx).Sandbox, nil, func() (err error) {
		out, err = d.writeUpload(w, r)
		return err
	})
	if err != nil {
		writeError(w, d.cfg.Log, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// partFileName is a multipart part's file name as the client sent it,
// directories included (multipart.Part.FileName keeps only the base
// name, which would write every file of the SDK's writeFiles into the
// home directory).
func partFileName(part *multipart.Part) string {
	_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

// writeUpload writes the upload's files: one octet-stream body to ?path,
// or multipart parts named "file" (each to ?path, or to its file name
// when no path is given); parents are made.
func (d *Door) writeUpload(w http.ResponseWriter, r *http.Request) ([]writtenInfo, error) {
	ctx, p := r.Context(), principalOf(r.Context())
	user, err := fileUser(r)
	if err != nil {
		return nil, err
	}
	user = d.defaultUser(ctx, user)
	qpath := r.URL.Query().Get("path")
	meta, err := metadataOf(r.Header)
	if err != nil {
		return nil, err
	}
	f, err := d.cfg.Manager.Files(ctx, targetOf(ctx).Sandbox, true, p.Actor)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var made []string // what the upload created, given to the user after
	// put writes one file, its bytes bounded by the gate's bound of one
	// file write (declared: its length when the body is that file alone).
	put := func(name string, in io.Reader, declared int64) (writtenInfo, error) {
		body, err := access.FileWriteBody(in, declared)
		if err != nil {
			return writtenInfo{}, err
		}
		path, err := absPath(name, user)
		if err != nil {
			return writtenInfo{}, err
		}
		dirs, err := d.mkdirs(ctx, f, pathpkg.Dir(path), p.Actor)
		if err != nil {
			return writtenInfo{}, err
		}
		made = append(made, dirs...)
		fi, err := f.WriteFileAs(ctx, path, 0o644, body, files.Ownership{Xattrs: meta}, p.Actor)
		if err != nil {
			return writtenInfo{}, err
		}
		made = append(made, path)
		return writtenInfo{Name: pathpkg.Base(path), Type: "file", Path: path, Metadata: metadataFrom(fi.Xattrs)}, nil
	}
	defer func() {
		if len(made) > 0 {
			d.giveTo(ctx, user, made)
		}
	}()
	body := &boundedReader{r: r.Body, left: maxUpload}
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
				return nil, errdefs.Invalid("multipart body: %v", err)
			}
			if part.FormName() != "file" {
				part.Close()
				continue
			}
			name := qpath
			if name == "" {
				name = partFileName(part)
			}
			wi, err := put(name, part, -1)
			part.Close()
			if err != nil {
				return nil, err
			}
			out = append(out, wi)
		}
	} else {
		var in io.Reader = body
		declared := r.ContentLength
		switch ce := r.Header.Get("Content-Encoding"); ce {
		case "":
		case "gzip":
			// The SDK's gzip upload: the file is what it inflates to,
			// bounded like an upload (a small body that inflates past
			// the bound is refused, not written whole).
			zr, err := gzip.NewReader(body)
			if err != nil {
				return nil, errdefs.Invalid("gzip body: %v", err)
			}
			defer zr.Close()
			in, declared = zr, -1
		default:
			return nil, errdefs.Invalid("Content-Encoding %q is not supported (gzip is)", ce)
		}
		wi, err := put(qpath, in, declared)
		if err != nil {
			return nil, err
		}
		out = append(out, wi)
	}
	if len(out) == 0 {
		return nil, errdefs.Invalid("no file in the upload")
	}
	return out, nil
}

// boundedReader reads r, failing once more than left bytes came.
type boundedReader struct {
	r    io.Reader
	left int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, errdefs.TooLarge("an upload carries at most %d bytes", int64(maxUpload))
	}
	return n, err
}

// mkdirs makes dir and its missing parents and returns the ones it made,
// outermost first.
func (d *Door) mkdirs(ctx context.Context, f *files.Files, dir, actor string) ([]string, error) {
	var missing []string
	for p := dir; p != "/"; p = pathpkg.Dir(p) {
		if _, err := f.Stat(ctx, p); err == nil {
			break
		} else if !errors.Is(err, errdefs.ErrNotFound) {
			return nil, err
		}
		missing = append([]string{p}, missing...)
	}
	if len(missing) == 0 {
		return nil, nil
	}
	if err := f.Mkdir(ctx, dir, 0o755, true, actor); err != nil && !errors.Is(err, errdefs.ErrConflict) {
		return nil, err
	}
	return missing, nil
}

// giveTo makes user (not root) the owner of paths the door just created
// for a call acting as that user, as envd's own writes are: berth's file
// access writes as the sandbox's root. It runs chown in the sandbox as
// root, bounded by the daemon's own deadline; the paths are ones this
// call made, and the command's only effect is inside the sandbox.
func (d *Door) giveTo(ctx context.Context, user string, paths []string) {
	if user == "" || user == "root" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var msg bytes.Buffer
	ex, err := d.cfg.Manager.Exec(ctx, targetOf(ctx).Sandbox, &engine.ExecRequest{
		Cmd: append([]string{"chown", "-h", "--", user + ":"}, paths...), User: "root",
	}, engine.ExecIO{Stdout: &msg, Stderr: &msg}, principalOf(ctx).Actor)
	if err == nil && ex.Code != 0 {
		err = errors.New(strings.TrimSpace(msg.String()))
	}
	if err != nil {
		d.cfg.Log.Warn("e2b: giving written files to their user", "sandbox", targetOf(ctx).Sandbox, "user", user, "err", err)
	}
}

// proxy sends a request for a sandbox's own port through berth's port
// proxy, with the sandbox's token (X-Access-Token or E2B's traffic token
// header) holding the ports scope.
func (d *Door) proxy(w http.ResponseWriter, r *http.Request, t Target) {
	tok := r.Header.Get("X-Access-Token")
	if tok == "" {
		tok = r.Header.Get("E2b-Traffic-Access-Token")
	}
	if tok == "" {
		if d.publicTraffic(r.Context(), t.Sandbox, t.Port) {
			d.forward(w, r.WithContext(d.cfg.WithCaller(r.Context(), auth.Anonymous)), t)
			return
		}
		// E2B's answer to a port asked without its traffic token; the
		// same for a sandbox that serves its ports only with one and
		// for an id that names nothing, so it tells no one which exist.
		writeError(w, d.cfg.Log, errdefs.Permission("this sandbox port takes the sandbox's traffic access token (e2b-traffic-access-token)"))
		return
	}
	p, err := d.cfg.Server.Credential(r.Context(), tok, access.Ports, access.Target{Sandbox: t.Sandbox, Port: t.Port})
	if err == nil && !p.IsLease() {
		err = errdefs.Permission("a sandbox port takes the sandbox's access token")
	}
	if err != nil {
		writeError(w, d.cfg.Log, err)
		return
	}
	ctx, release := d.cfg.Server.Bind(r.Context(), p) // a proxied WebSocket ends with its token
	defer release()
	d.forward(w, r.WithContext(d.cfg.WithCaller(ctx, p)), t)
}

// publicTraffic reports whether sandbox id serves port without a token,
// as the access layer decides (access.PublicPort): made through the door
// without allowPublicTraffic: false, and running — or paused with
// auto-resume, which the request then wakes (as E2B's autoResume does on
// traffic) — or a port the sandbox lists as public.
func (d *Door) publicTraffic(ctx context.Context, id string, port int) bool {
	sb, err := d.cfg.Manager.Get(d.cfg.WithCaller(ctx, auth.Anonymous), id)
	return err == nil && access.PublicPort(sb, port, access.DoorE2B)
}

// forward sends r, authorized, to the sandbox's port through berth's port
// proxy, without the door's own headers, with the Host the sandbox's
// maskRequestHost names.
func (d *Door) forward(w http.ResponseWriter, r *http.Request, t Target) {
	for _, h := range []string{"X-Access-Token", "E2b-Traffic-Access-Token", "E2b-Sandbox-Id", "E2b-Sandbox-Port"} {
		r.Header.Del(h)
	}
	if sb, err := d.cfg.Manager.Get(r.Context(), t.Sandbox); err == nil && sb.Spec.MaskRequestHost != "" {
		r.Host = strings.ReplaceAll(sb.Spec.MaskRequestHost, "${PORT}", strconv.Itoa(t.Port))
	}
	d.cfg.Server.ProxyPort(w, r, t.Sandbox, t.Port, r.URL.Path)
}
