package image

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"unicode"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/berth-sh/berth/internal/errdefs"
)

// maxCredentialsFile bounds the credentials file read at start.
const maxCredentialsFile = 1 << 20

// Credentials are registry accounts by registry host ("host" or
// "host:port"), read from a docker-style config.json: a Keychain that
// answers with them and with anonymous access for every other registry.
// The daemon's HOME and docker's credential helpers are not consulted.
type Credentials struct {
	auths map[string]authn.AuthConfig
}

// authEntry is one entry of config.json's "auths".
type authEntry struct {
	Auth          string `json:"auth"`
	Username      string `json:"username"`
	Password      string `json:"password"`
	IdentityToken string `json:"identitytoken"`
	RegistryToken string `json:"registrytoken"`
	Email         string `json:"email"` // ignored; old docker wrote it
}

// ParseCredentials parses a docker config.json (only "auths" is read).
// An entry gives "auth" (base64 of user:password), "username" and
// "password", or a token ("identitytoken" for an OAuth2 refresh token,
// "registrytoken" for a bearer token); keys are a registry host, with or
// without a scheme and path as docker writes them
// ("https://index.docker.io/v1/"). "credsStore" and "credHelpers" are
// refused: the daemon runs no helper programs, the accounts it uses are in
// the file.
func ParseCredentials(data []byte) (*Credentials, error) {
	if len(data) > maxCredentialsFile {
		return nil, errdefs.TooLarge("credentials file is larger than %d bytes", maxCredentialsFile)
	}
	var f struct {
		Auths       map[string]authEntry `json:"auths"`
		CredsStore  string               `json:"credsStore"`
		CredHelpers map[string]string    `json:"credHelpers"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, &errdefs.Error{Category: errdefs.ErrInvalid, Msg: "credentials file is not docker config.json: " + err.Error()}
	}
	if f.CredsStore != "" || len(f.CredHelpers) > 0 {
		return nil, errdefs.Invalid("credentials file names credential helpers (credsStore, credHelpers): the daemon runs none; put the accounts in \"auths\"")
	}
	c := &Credentials{auths: map[string]authn.AuthConfig{}}
	for key, e := range f.Auths {
		host, err := credentialsHost(key)
		if err != nil {
			return nil, err
		}
		var ac authn.AuthConfig
		switch {
		case e.Auth != "":
			raw, err := base64.StdEncoding.DecodeString(e.Auth)
			if err != nil {
				return nil, errdefs.Invalid("credentials for %s: \"auth\" is not base64", host)
			}
			user, pass, ok := strings.Cut(string(raw), ":")
			if !ok || user == "" {
				return nil, errdefs.Invalid("credentials for %s: \"auth\" is not base64 of user:password", host)
			}
			ac.Username, ac.Password = user, pass
		case e.Username != "":
			ac.Username, ac.Password = e.Username, e.Password
		}
		ac.IdentityToken, ac.RegistryToken = e.IdentityToken, e.RegistryToken
		if ac == (authn.AuthConfig{}) {
			return nil, errdefs.Invalid("credentials for %s: no auth, username, identitytoken or registrytoken", host)
		}
		if _, dup := c.auths[host]; dup {
			return nil, errdefs.Invalid("credentials for %s given twice", host)
		}
		c.auths[host] = ac
	}
	return c, nil
}

// LoadCredentials reads and parses the credentials file at path.
func LoadCredentials(path string) (*Credentials, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxCredentialsFile+1))
	if err != nil {
		return nil, err
	}
	return ParseCredentials(data)
}

// credentialsHost reduces an "auths" key to the registry host[:port] it
// names: docker writes bare hosts and URLs alike.
func credentialsHost(key string) (string, error) {
	h := key
	if i := strings.Index(h, "://"); i >= 0 {
		h = h[i+3:]
	}
	h, _, _ = strings.Cut(h, "/")
	h = strings.ToLower(h)
	if h == "" || strings.ContainsFunc(h, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return "", errdefs.Invalid("credentials file: %q names no registry host", key)
	}
	reg, err := name.NewRegistry(h)
	if err != nil {
		return "", errdefs.Invalid("credentials file: %q names no registry host", key)
	}
	// As references name it: docker.io is index.docker.io.
	return reg.RegistryStr(), nil
}

// Hosts lists the registries the credentials are for (no secrets).
func (c *Credentials) Hosts() []string {
	out := make([]string, 0, len(c.auths))
	for h := range c.auths {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// Resolve implements authn.Keychain.
func (c *Credentials) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if ac, ok := c.auths[strings.ToLower(r.RegistryStr())]; ok {
		return authn.FromConfig(ac), nil
	}
	return authn.Anonymous, nil
}

// WithHubMirror makes host[:port] the registry Docker Hub's references
// (ubuntu:22.04, docker.io/library/ubuntu) are pulled and resolved from,
// as docker's registry-mirrors: the same repository path (library/ubuntu)
// on the mirror. plain allows it plain HTTP. Pushes are not redirected.
func WithHubMirror(host string, plain bool) Option {
	return func(o *options) { o.hubMirror, o.hubMirrorPlain = host, plain }
}

// ParseMirror reads a --registry-mirror value: host[:port], or
// http://host[:port] for a plain-HTTP mirror.
func ParseMirror(v string) (host string, plain bool, err error) {
	h := v
	switch {
	case strings.HasPrefix(h, "http://"):
		h, plain = strings.TrimPrefix(h, "http://"), true
	case strings.HasPrefix(h, "https://"):
		h = strings.TrimPrefix(h, "https://")
	}
	h = strings.TrimSuffix(h, "/")
	if h == "" || strings.ContainsAny(h, "/@?# ") {
		return "", false, errdefs.Invalid("registry mirror %q: want host[:port] or http://host[:port]", v)
	}
	if _, err := name.NewRegistry(h); err != nil {
		return "", false, errdefs.Invalid("registry mirror %q: %v", v, err)
	}
	return h, plain, nil
}

// mirrored is r on the Docker Hub mirror when r is Docker Hub's and the
// store has a mirror, else r.
func (s *Store) mirrored(r name.Reference) (name.Reference, error) {
	if s.opts.hubMirror == "" || r.Context().RegistryStr() != name.DefaultRegistry {
		return r, nil
	}
	var nopts []name.Option
	if s.opts.hubMirrorPlain {
		nopts = append(nopts, name.Insecure)
	}
	repo := s.opts.hubMirror + "/" + r.Context().RepositoryStr()
	if d, ok := r.(name.Digest); ok {
		return name.NewDigest(repo+"@"+d.DigestStr(), nopts...)
	}
	return name.NewTag(repo+":"+r.Identifier(), nopts...)
}

// WithRegistryCerts names a directory of per-registry CA certificates in
// docker's layout: <dir>/<host[:port]>/*.crt are trusted, besides the
// system's roots, for that registry alone. It is read at each transfer.
func WithRegistryCerts(dir string) Option { return func(o *options) { o.certsDir = dir } }

// transportFor returns the HTTP transport for reg: the default one, or one
// trusting reg's certificates from the certs directory, and its HTTP/1.1
// twin for blobs (blobTransport). The directory is read at each transfer;
// a transport is kept per registry while its certificates stay the same
// (names, sizes, modification times), so the transfers of many creates of
// one registry's images reuse connections rather than each paying a TLS
// handshake.
func (s *Store) transportFor(reg name.Registry) (tr, blobs *http.Transport, err error) {
	base := remote.DefaultTransport.(*http.Transport)
	baseTwin := func() (*http.Transport, *http.Transport, error) {
		s.trMu.Lock()
		defer s.trMu.Unlock()
		if s.baseBlobs == nil {
			s.baseBlobs = blobTransport(base)
		}
		return base, s.baseBlobs, nil
	}
	if s.opts.certsDir == "" {
		return baseTwin()
	}
	host := reg.RegistryStr()
	if host == "" || host == "." || host == ".." || strings.ContainsAny(host, "/\\\x00") {
		return baseTwin()
	}
	dir := filepath.Join(s.opts.certsDir, host)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return baseTwin()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("registry certificates for %s: %w", host, err)
	}
	var crts []os.DirEntry
	var key strings.Builder
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".crt") || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			return nil, nil, fmt.Errorf("registry certificates for %s: %w", host, err)
		}
		fmt.Fprintf(&key, "%s\x00%d\x00%d\x00", e.Name(), fi.Size(), fi.ModTime().UnixNano())
		crts = append(crts, e)
	}
	if len(crts) == 0 {
		return baseTwin()
	}
	s.trMu.Lock()
	defer s.trMu.Unlock()
	if c, ok := s.transports[host]; ok && c.key == key.String() {
		return c.tr, c.blobs, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	for _, e := range crts {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, nil, fmt.Errorf("registry certificates for %s: %w", host, err)
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, nil, errdefs.Invalid("registry certificates for %s: %s holds no PEM certificate", host, e.Name())
		}
	}
	t := base.Clone()
	if t.TLSClientConfig == nil {
		t.TLSClientConfig = &tls.Config{}
	}
	t.TLSClientConfig.RootCAs = pool
	if old, ok := s.transports[host]; ok {
		// Its certificates changed.
		old.tr.CloseIdleConnections()
		old.blobs.CloseIdleConnections()
	}
	if s.transports == nil {
		s.transports = map[string]cachedTransport{}
	}
	c := cachedTransport{key: key.String(), tr: t, blobs: blobTransport(t)}
	s.transports[host] = c
	return c.tr, c.blobs, nil
}

// cachedTransport is a registry's transports and the certificates they
// trust.
type cachedTransport struct {
	key       string
	tr, blobs *http.Transport
}

// blobTransport is t speaking HTTP/1.1 only, for layer blobs. Over HTTP/2
// Go's client sends a WINDOW_UPDATE frame (a TLS record and a write
// syscall) for every few KiB the caller reads, which cost a third of a
// 1 GiB pull's time (docs/images.md); HTTP/1.1 streams the body with no
// frames, and parallel layers get a connection each rather than sharing
// one stream window.
func blobTransport(t *http.Transport) *http.Transport {
	c := t.Clone()
	c.ForceAttemptHTTP2 = false
	c.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	if c.TLSClientConfig == nil {
		c.TLSClientConfig = &tls.Config{}
	} else {
		c.TLSClientConfig = c.TLSClientConfig.Clone()
	}
	c.TLSClientConfig.NextProtos = []string{"http/1.1"}
	c.ReadBufferSize = 64 << 10
	return c
}

// RequestAuth is a registry account given with one request: used for
// that transfer instead of the daemon's credentials, never stored.
// Username and Password, or Token (a registry bearer token).
type RequestAuth struct {
	Username, Password, Token string
}

type authKey struct{}

// WithRequestAuth returns a context under which pulls and pushes use a
// (nil: anonymous access) instead of the Store's keychain: a tenant's
// transfers never borrow the daemon's registry accounts.
func WithRequestAuth(ctx context.Context, a *RequestAuth) context.Context {
	var au authn.Authenticator = authn.Anonymous
	if a != nil && (a.Username != "" || a.Token != "") {
		au = authn.FromConfig(authn.AuthConfig{Username: a.Username, Password: a.Password, RegistryToken: a.Token})
	}
	return context.WithValue(ctx, authKey{}, au)
}

// remoteOptions are the options of a transfer with ref's registry.
func (s *Store) remoteOptions(ctx context.Context, ref name.Reference) ([]remote.Option, func(), error) {
	tr, _, err := s.transportFor(ref.Context().Registry)
	if err != nil {
		return nil, nil, err
	}
	closer := func() {} // the transports are kept (transportFor)
	auth := remote.WithAuthFromKeychain(s.opts.keychain)
	if a, ok := ctx.Value(authKey{}).(authn.Authenticator); ok {
		auth = remote.WithAuth(a)
	}
	return []remote.Option{remote.WithContext(ctx), remote.WithTransport(tr), auth}, closer, nil
}

// blobFetcher reads one repository's layer blobs for a pull, over the
// HTTP/1.1 transport, with the pull's account. The blob's bytes are
// handed over unhashed: ensureLayer hashes each byte once for both
// digests where it can (an uncompressed layer's blob is its tar), where
// go-containerregistry's reader would hash them once more on its own.
type blobFetcher struct {
	ctx  context.Context // the pull's: the token exchange outlives any one layer
	repo name.Repository
	tr   http.RoundTripper
	auth authn.Authenticator

	once   sync.Once
	client *http.Client
	err    error
}

// blobFetcher returns the blob reader of a pull of ref.
func (s *Store) blobFetcher(ctx context.Context, ref name.Reference) (*blobFetcher, error) {
	_, blobs, err := s.transportFor(ref.Context().Registry)
	if err != nil {
		return nil, err
	}
	auth, ok := ctx.Value(authKey{}).(authn.Authenticator)
	if !ok {
		if auth, err = s.opts.keychain.Resolve(ref.Context()); err != nil {
			return nil, err
		}
	}
	return &blobFetcher{ctx: ctx, repo: ref.Context(), tr: blobs, auth: auth}, nil
}

// open starts fetching blob digest of size bytes. The stream fails if
// the registry sends more or fewer bytes than size; its digest is the
// caller's to check.
func (f *blobFetcher) open(ctx context.Context, digest v1.Hash, size int64) (io.ReadCloser, error) {
	f.once.Do(func() {
		// The registry's challenge and token, once for every layer.
		rt, err := transport.NewWithContext(f.ctx, f.repo.Registry, f.auth, f.tr, []string{f.repo.Scope(transport.PullScope)})
		f.client, f.err = &http.Client{Transport: rt}, err
	})
	if f.err != nil {
		return nil, f.err
	}
	u := url.URL{Scheme: f.repo.Scheme(), Host: f.repo.RegistryStr(), Path: "/v2/" + f.repo.RepositoryStr() + "/blobs/" + digest.String()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, err
	}
	if err := transport.CheckError(resp, http.StatusOK); err != nil {
		resp.Body.Close()
		return nil, err
	}
	if resp.ContentLength >= 0 && size > 0 && resp.ContentLength != size {
		resp.Body.Close()
		return nil, sizeMismatch(digest, resp.ContentLength, size)
	}
	return &sizedBody{ReadCloser: resp.Body, digest: digest, want: size}, nil
}

// sizeMismatch is a blob served at another size than the manifest's.
func sizeMismatch(digest v1.Hash, got, want int64) error {
	return &errdefs.Error{Category: errdefs.ErrUnavailable, Reason: errdefs.ErrDigestMismatch,
		Msg: fmt.Sprintf("a blob the registry served does not match its digest: %s has %d bytes, the manifest says %d", digest, got, want)}
}

// sizedBody fails a blob that ends before, or goes on after, the size
// the manifest gives it (0: unknown, not checked).
type sizedBody struct {
	io.ReadCloser
	digest    v1.Hash
	want, got int64
}

func (b *sizedBody) Read(p []byte) (int, error) {
	if b.want > 0 && int64(len(p)) > b.want-b.got+1 {
		p = p[:b.want-b.got+1] // one byte past the end tells a longer blob
	}
	n, err := b.ReadCloser.Read(p)
	b.got += int64(n)
	if b.want > 0 && (b.got > b.want || err == io.EOF && b.got != b.want) {
		return n, sizeMismatch(b.digest, b.got, b.want)
	}
	return n, err
}

// resolveImage fetches ref's manifest and picks the linux/GOARCH image of
// an index. Anything but an image or an index is refused by media type.
func (s *Store) resolveImage(ref name.Reference, opts []remote.Option) (v1.Image, error) {
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return nil, err
	}
	switch {
	case desc.MediaType.IsIndex():
		ii, err := desc.ImageIndex()
		if err != nil {
			return nil, err
		}
		img, err := pickImage(ii, "", 0)
		if err != nil {
			return nil, unsupported(err)
		}
		return img, nil
	case desc.MediaType.IsImage():
		return desc.Image()
	default:
		return nil, &errdefs.Error{Category: errdefs.ErrInvalid, Reason: errdefs.ErrImageUnsupported,
			Msg: fmt.Sprintf("manifest has media type %q, not a container image or image index", desc.MediaType)}
	}
}

// unsupported gives an invalid-image error the ErrImageUnsupported reason.
func unsupported(err error) error {
	var e *errdefs.Error
	if errors.As(err, &e) && errors.Is(err, errdefs.ErrInvalid) && e.Reason == nil {
		c := *e
		c.Reason = errdefs.ErrImageUnsupported
		return &c
	}
	return err
}

// registryErr names a failed transfer's step, reference and cause, with
// the registry reason (errdefs.ErrRegistry*) that gives it a stable code.
// Errors berth itself classified keep their category and get the step
// and reference in front.
func registryErr(step, ref string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	wrap := func(cat, reason error, cause string) error {
		return &errdefs.Error{Category: cat, Reason: reason, Msg: step + " " + ref + ": " + cause, Err: err}
	}
	if cause, ok := digestMismatch(err); ok {
		return wrap(errdefs.ErrUnavailable, errdefs.ErrDigestMismatch, cause)
	}
	var e *errdefs.Error
	if errors.As(err, &e) {
		c := *e
		c.Msg = step + " " + ref + ": " + e.Msg
		if errors.Is(err, errdefs.ErrDigestMismatch) {
			// What the registry served is wrong, not the request.
			c.Category, c.Reason = errdefs.ErrUnavailable, errdefs.ErrDigestMismatch
		}
		return &c
	}
	var terr *transport.Error
	if errors.As(err, &terr) {
		msg := registryMessage(terr)
		switch terr.StatusCode {
		case http.StatusNotFound:
			return wrap(errdefs.ErrNotFound, errdefs.ErrImageNotFound, "the registry has no such image (404"+msg+")")
		case http.StatusUnauthorized:
			return wrap(errdefs.ErrPermission, errdefs.ErrRegistryUnauthorized,
				"the registry refused the credentials, or none were given for it (401"+msg+
					"; the host's come from serve --registry-auth, a tenant's only with its request)")
		case http.StatusForbidden:
			return wrap(errdefs.ErrPermission, errdefs.ErrRegistryDenied, "the registry denied access (403"+msg+")")
		case http.StatusUnsupportedMediaType:
			return wrap(errdefs.ErrInvalid, errdefs.ErrImageUnsupported, "the registry refused the media type (415"+msg+")")
		}
		return wrap(errdefs.ErrUnavailable, errdefs.ErrRegistry, fmt.Sprintf("the registry answered %d%s", terr.StatusCode, msg))
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return wrap(errdefs.ErrUnavailable, errdefs.ErrRegistryDNS, "cannot resolve the registry's host name: "+dnsErr.Error())
	}
	if cause, ok := tlsCause(err); ok {
		return wrap(errdefs.ErrUnavailable, errdefs.ErrRegistryTLS, "TLS: "+cause)
	}
	var opErr *net.OpError
	isOp := errors.As(err, &opErr)
	if isOp && opErr.Op == "dial" || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.ETIMEDOUT) {
		cause := "cannot connect to the registry"
		if isOp {
			cause += ": " + opErr.Err.Error()
			if opErr.Addr != nil {
				cause += " at " + opErr.Addr.String()
			}
		} else {
			cause += ": " + clip(err.Error())
		}
		return wrap(errdefs.ErrUnavailable, errdefs.ErrRegistryUnreachable, cause)
	}
	return wrap(errdefs.ErrUnavailable, errdefs.ErrRegistry, "registry transfer failed: "+clip(err.Error()))
}

// registryMessage is the registry's own error text, clipped, for the
// message ("" when it sent none).
func registryMessage(terr *transport.Error) string {
	var parts []string
	for _, d := range terr.Errors {
		parts = append(parts, clip(string(d.Code)+" "+d.Message))
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, "; ")
}

// clip keeps a remote party's text printable and short.
func clip(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// tlsCause recognises a failed TLS handshake or certificate check.
func tlsCause(err error) (string, bool) {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	var rec tls.RecordHeaderError
	switch {
	case errors.As(err, &unknown):
		return "the registry's certificate is signed by an unknown authority (give its CA in serve --registry-certs DIR/<host:port>/ca.crt)", true
	case errors.As(err, &host):
		return "the registry's certificate is not for this address: " + host.Error(), true
	case errors.As(err, &invalid):
		return "the registry's certificate is invalid: " + invalid.Error(), true
	case errors.As(err, &verify):
		return "the registry's certificate failed verification: " + verify.Err.Error(), true
	case errors.As(err, &rec):
		return "the registry did not answer TLS (plain HTTP? only --insecure allows it)", true
	}
	return "", false
}

// digestMismatch recognises go-containerregistry's failed verification of
// a blob it read (its error type is internal; the e2e test of a corrupted
// blob in a real registry holds this to the text).
func digestMismatch(err error) (string, bool) {
	if errors.Is(err, errdefs.ErrDigestMismatch) {
		return "", false
	}
	s := err.Error()
	if i := strings.Index(s, "error verifying sha256 checksum"); i >= 0 {
		return "a blob the registry served does not match its digest: " + clip(s[i:]), true
	}
	return "", false
}

// platform is the one image Pull takes from an index.
var platform = v1.Platform{OS: "linux", Architecture: runtime.GOARCH}

// Resolve asks ref's registry which manifest ref names now (a HEAD of the
// manifest, a GET when the registry answers no digest to HEAD) and
// returns the reference pinned to it, "repository@sha256:<hex>", and the
// digest. Pulling the pinned reference imports exactly what was resolved,
// even if the tag moves meanwhile. Credentials and certificates are
// Pull's; a failure is named as Pull's are.
func (s *Store) Resolve(ctx context.Context, ref string, insecure bool) (pinned, digest string, err error) {
	var nopts []name.Option
	if insecure {
		nopts = append(nopts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nopts...)
	if err != nil {
		return "", "", &errdefs.Error{Category: errdefs.ErrInvalid, Msg: fmt.Sprintf("bad image reference %q: %v", ref, err), Err: err}
	}
	if r, err = s.mirrored(r); err != nil {
		return "", "", errdefs.Invalid("bad image reference %q on the registry mirror: %v", ref, err)
	}
	if d, ok := r.(name.Digest); ok {
		if _, valid := parseID(d.DigestStr()); !valid {
			return "", "", errdefs.Invalid("bad image reference %q: only sha256 digests are supported", ref)
		}
		return d.String(), d.DigestStr(), nil
	}
	opts, done, err := s.remoteOptions(ctx, r)
	if err != nil {
		return "", "", registryErr("resolve", ref, err)
	}
	defer done()
	desc, err := remote.Head(r, opts...)
	if err != nil {
		var terr *transport.Error
		if !errors.As(err, &terr) || terr.StatusCode == http.StatusNotFound || terr.StatusCode == http.StatusUnauthorized ||
			terr.StatusCode == http.StatusForbidden {
			return "", "", registryErr("resolve", ref, err)
		}
		// Some registries answer HEAD badly; the manifest itself says.
		full, gerr := remote.Get(r, opts...)
		if gerr != nil {
			return "", "", registryErr("resolve", ref, gerr)
		}
		desc = &full.Descriptor
	}
	if desc.Digest.Algorithm != "sha256" {
		return "", "", registryErr("resolve", ref, errdefs.Invalid("the registry names the manifest by %s, not a sha256 digest", desc.Digest))
	}
	pinned = r.Context().Digest(desc.Digest.String()).String()
	return pinned, desc.Digest.String(), nil
}
