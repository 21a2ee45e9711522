// Package console is berth's web console: a Preact application written in
// TypeScript (its sources in web/, built with esbuild at development time
// into assets/, which is committed: `make console`, checked by `make
// lint`) with xterm.js bundled in, embedded in the binary and served
// by the daemon under /console/ on its TCP API listeners, with the headers
// that keep it apart from everything else the daemon's origin serves (a
// strict Content-Security-Policy, no framing, no sniffing, no referrer, its
// own browsing-context group). It also holds the one-time sign-in codes of
// `berth console` (codes.go). Everything the console shows comes from the
// /v1 API with the caller's own credential; the console has no API of its
// own beyond the code exchange.
package console

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// Prefix is where the console is mounted.
const Prefix = "/console/"

//go:embed assets
var assets embed.FS

// Assets is the console's files, rooted at assets/.
func Assets() fs.FS {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err)
	}
	return sub
}

// nonceMark is replaced in index.html by each answer's style nonce.
const nonceMark = "{{NONCE}}"

// CSP is the console's Content-Security-Policy, with %s the answer's style
// nonce. Scripts only from the console's own files (no inline script, no
// eval); styles from its files and from <style> elements carrying the
// nonce (xterm.js writes its theme into such elements; app.js gives them
// the nonce); requests only to the daemon itself; no plugins, no base
// rewriting, no forms posted anywhere, never framed.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self' 'nonce-%s'; img-src 'self' data: blob:; " +
	"connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the console's files below Prefix; anything else (a path
// that names no file) is the application's page, whose script routes by
// the URL fragment.
func Handler() http.Handler {
	files := Assets()
	index, err := fs.ReadFile(files, "index.html")
	if err != nil {
		panic(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(path.Clean("/"+strings.TrimPrefix(r.URL.Path, Prefix)), "/")
		nonce := newNonce()
		setHeaders(w.Header(), nonce)
		if name == "" || name == "index.html" {
			serveIndex(w, r, index, nonce)
			return
		}
		b, err := fs.ReadFile(files, name)
		if err != nil {
			// Not a file: 404 as text, never the page (a mistyped asset
			// must not come back as HTML that the browser then refuses
			// to run as script).
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte("404 not found\n"))
			return
		}
		if ct := contentType(name); ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		// Assets change only with the binary: revalidated each time by
		// their content's ETag (embed keeps no modification time).
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("ETag", etag(b))
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
	})
}

func serveIndex(w http.ResponseWriter, r *http.Request, index []byte, nonce string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// The page carries this answer's nonce: never cached, never reused.
	w.Header().Set("Cache-Control", "no-store")
	body := bytes.ReplaceAll(index, []byte(nonceMark), []byte(nonce))
	if r.Method == http.MethodHead {
		return
	}
	w.Write(body)
}

// setHeaders puts the console's security headers on an answer.
func setHeaders(h http.Header, nonce string) {
	h.Set("Content-Security-Policy", strings.Replace(CSP, "%s", nonce, 1))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	// Its own browsing-context group: a page of the same origin (a
	// sandbox's port served through the path-routed proxy) that opened
	// the console, or that the console opened, holds no handle to it.
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=(), usb=()")
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".png":
		return "image/png"
	case ".json", ".webmanifest":
		return "application/json"
	}
	return "text/plain; charset=utf-8"
}

func etag(b []byte) string {
	sum := sha256.Sum256(b)
	return `"` + base64.RawURLEncoding.EncodeToString(sum[:12]) + `"`
}

func newNonce() string {
	b := make([]byte, 18)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
