package server

import (
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/access"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/console"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/openapi"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
)

// ConsoleSessionTTL is how long the API key a console sign-in code is
// traded for lives.
const ConsoleSessionTTL = 8 * time.Hour

// BearerProtocol prefixes the WebSocket subprotocol that carries a bearer
// credential, for browsers, which cannot set an Authorization header on a
// WebSocket: the client offers WSProtocol and BearerProtocol+token, the
// server selects WSProtocol (never echoing the token). Accepted on the PTY
// routes only (bearerRoutes), never forwarded by the port proxy.
const (
	BearerProtocol = "berth.bearer."
	WSProtocol     = rest.WSProtocol
)

// bearerRoutes are the routes that read a bearer from the WebSocket
// subprotocol when no Authorization header came.
var bearerRoutes = map[string]bool{
	"GET /v1/sandboxes/{id}/exec/ws":            true,
	"GET /v1/sandboxes/{id}/processes/{pid}/ws": true,
}

// wsBearer is the token a WebSocket upgrade offers as BearerProtocol+token.
func wsBearer(r *http.Request) string {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return ""
	}
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(v, ",") {
			if tok, ok := strings.CutPrefix(strings.TrimSpace(p), BearerProtocol); ok {
				return tok
			}
		}
	}
	return ""
}

// stripBearerProtocol drops BearerProtocol offers from a request going to
// a sandbox: the credential is berth's, not the sandbox's.
func stripBearerProtocol(h http.Header) {
	vs := h.Values("Sec-WebSocket-Protocol")
	if len(vs) == 0 {
		return
	}
	var keep []string
	for _, v := range vs {
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); p != "" && !strings.HasPrefix(p, BearerProtocol) {
				keep = append(keep, p)
			}
		}
	}
	h.Del("Sec-WebSocket-Protocol")
	if len(keep) > 0 {
		h.Set("Sec-WebSocket-Protocol", strings.Join(keep, ", "))
	}
}

// scrubProxiedResponse removes what a sandbox's answer, served through
// the path-routed port proxy on the daemon's own origin, could use
// against the console on that origin: a service worker scope widened past
// its port's path (it could then intercept /console/ and every /v1 call,
// Authorization header and all) and an order to clear the origin's
// storage (the console's session).
func scrubProxiedResponse(h http.Header) {
	h.Del("Service-Worker-Allowed")
	h.Del("Clear-Site-Data")
}

// isolatePathRouted makes what the path-routed proxy serves on the
// daemon's own origin harmless to it in a browser: the document gets an
// opaque origin (CSP sandbox, no allow-same-origin: no script reaches the
// origin's storage, cookies or same-origin requests, the console's
// included), and it sets no cookie there. Browsers are meant for the
// host-routed names, each its own origin.
func isolatePathRouted(h http.Header) {
	h.Del("Set-Cookie")
	h.Del("Set-Cookie2")
	h.Set("Content-Security-Policy", "sandbox")
	h.Set("X-Content-Type-Options", "nosniff")
}

func (s *Server) consoleRoutes() []Route {
	hf := func(f http.HandlerFunc) http.Handler { return f }
	files := console.Handler()
	toConsole := hf(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, console.Prefix, http.StatusFound)
	})
	return []Route{
		{Pattern: "GET /{$}", Op: access.ConsoleAssets, Out: found, h: toConsole},
		{Pattern: "GET /console", Op: access.ConsoleAssets, Out: found, h: toConsole},
		{Pattern: "GET /console/{path...}", Op: access.ConsoleAssets, Out: ok(openapi.Text("text/html")), h: files},
		{Pattern: "POST /v1/console/codes", Op: access.HostConsoleCode, Out: created(api.ConsoleCode{}), h: hf(s.consoleCode)},
		{Pattern: "POST /v1/console/session", Op: access.ConsoleSession, In: api.ConsoleSessionRequest{}, Out: created(api.ConsoleSession{}), h: hf(s.consoleSession)},
	}
}

// consoleCode mints a one-time sign-in code (the host admin's alone:
// `berth console` over the unix socket).
func (s *Server) consoleCode(w http.ResponseWriter, r *http.Request) {
	// Only the unix socket's caller: a host key over TCP (a console
	// session's own, say) minting codes would renew itself for ever, each
	// new key tied to nothing a revocation reaches.
	if trusted := rest.Trusted(r.Context()); !trusted {
		rest.Error(w, errdefs.Permission("sign-in codes are minted over the unix socket only: run berth console on the daemon's host"))
		return
	}
	code, exp := s.consoleCodes.Mint(s.now())
	out := api.ConsoleCode{Code: code, ExpiresAt: exp}
	for _, base := range s.ConsoleURLs {
		out.URLs = append(out.URLs, strings.TrimSuffix(base, "/")+console.Prefix+"#code="+url.QueryEscape(code))
	}
	w.Header().Set("Cache-Control", "no-store")
	rest.JSON(w, http.StatusCreated, out)
}

// consoleSession trades a sign-in code for a short-lived key of the
// host's scope. The code is the credential, so the route is public; what
// guards it: the code is 256 random bits, one-time, two minutes long; the
// body must be JSON (no HTML form can send it) from the daemon's own
// origin when a browser says where it comes from; the key comes back in
// the answer only (no cookie: nothing a cross-site request could ride).
func (s *Server) consoleSession(w http.ResponseWriter, r *http.Request) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		rest.Error(w, errdefs.Invalid("the sign-in exchange takes application/json"))
		return
	}
	if err := sameOrigin(r); err != nil {
		rest.Error(w, err)
		return
	}
	var req api.ConsoleSessionRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	now := s.now()
	if !s.consoleCodes.Redeem(req.Code, now) {
		rest.Error(w, errdefs.Unauthenticated("the sign-in code is unknown, used or expired: run berth console again"))
		return
	}
	id, key := auth.NewKey()
	k := &store.APIKey{ID: id, Name: "console", Hash: auth.Hash(key), Prefix: auth.PrefixOf(id),
		Role: string(auth.RoleAdmin), Scopes: []string{string(auth.ScopeAdmin)},
		CreatedAt: now, CreatedBy: "console-signin", ExpiresAt: now.Add(ConsoleSessionTTL)}
	if err := s.m.Store().CreateAPIKey(r.Context(), k); err != nil {
		rest.Error(w, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	rest.JSON(w, http.StatusCreated, api.ConsoleSession{APIKey: key, KeyID: id, ExpiresAt: k.ExpiresAt})
}

// sameOrigin refuses a request a browser says comes from another site or
// origin (Sec-Fetch-Site, else Origin against Host).
func sameOrigin(r *http.Request) error {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return errdefs.Permission("cross-origin request refused")
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			return errdefs.Permission("cross-origin request refused (Origin %q)", o)
		}
	}
	return nil
}
