package e2b

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Signed file URLs (the SDK's downloadUrl and uploadUrl): a GET or POST of
// /files that carries no access token but a signature the SDK made with
// the sandbox's envdAccessToken, over the path, the operation ("read" or
// "write"), the user and, when it has one, the expiry in Unix seconds:
//
//	"v1_" + base64(sha256(path ":" op ":" user ":" token [":" expiry]))
//
// (unpadded; the scheme is the SDK's and so is fixed). The token is the
// key: only a holder of one of the sandbox's lease tokens can make one,
// each signs for one sandbox (the door finds the lease of the target
// sandbox that made it, server.SignedLease, and nothing else's), one
// operation, one path and one user, and an expired one is refused before
// anything is looked up. The lease found is then authenticated as a
// token in the header is (server.Credential), so a URL dies with its
// token: when the sandbox stops, or the key that was shown the token is
// revoked. A URL with no expiry lives as long as that token.

// errSignature is every refusal of a signature that has not expired: a
// wrong one, another sandbox's, one for another path, user or operation,
// or one naming a sandbox that is not there, alike.
var errSignature = errdefs.Unauthenticated("invalid signature")

// maxSignature bounds the signature parameter ("v1_" and 43 characters).
const maxSignature = 64

// signature is the signature the SDK makes for token.
func signature(path, op, user, token, expiry string) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if expiry != "" {
		raw += ":" + expiry
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

// single is the one value of query parameter k ("" when absent); a
// parameter given twice is refused, so what is signed is what is served.
func single(q url.Values, k string) (string, error) {
	v := q[k]
	if len(v) > 1 {
		return "", errdefs.Invalid("query parameter %s given %d times", k, len(v))
	}
	if len(v) == 0 {
		return "", nil
	}
	return v[0], nil
}

// signedExpiry checks a signed URL's expiry against now: absent (no
// expiry), or canonical Unix seconds not yet past.
func signedExpiry(q url.Values, now time.Time) (string, error) {
	exp, err := single(q, "signature_expiration")
	if err != nil || exp == "" {
		return exp, err
	}
	n, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != exp {
		return "", errdefs.Invalid("signature_expiration: want Unix seconds")
	}
	if n < now.Unix() {
		return "", errdefs.Unauthenticated("signature is already expired")
	}
	return exp, nil
}

// signedToken returns the lease token a /files request's signature was
// made with, "" when it carries no signature. The request names the
// sandbox (its target); the signature must be that sandbox's.
func (d *Door) signedToken(r *http.Request, sandboxID string) (string, error) {
	q := r.URL.Query()
	sig, err := single(q, "signature")
	if err != nil || sig == "" {
		return "", err
	}
	if len(sig) > maxSignature {
		return "", errSignature
	}
	exp, err := signedExpiry(q, time.Now())
	if err != nil {
		return "", err
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	path, err := single(q, "path")
	if err != nil {
		return "", err
	}
	user, err := single(q, "username")
	if err != nil {
		return "", err
	}
	sb, err := d.cfg.Manager.Get(d.cfg.WithCaller(context.WithoutCancel(r.Context()), auth.Anonymous), sandboxID)
	if err != nil {
		return "", errSignature
	}
	tok, err := d.cfg.Server.SignedLease(r.Context(), sb, func(tok string) bool {
		return subtle.ConstantTimeCompare([]byte(signature(path, op, user, tok, exp)), []byte(sig)) == 1
	})
	if err != nil {
		return "", err
	}
	if tok == "" {
		return "", errSignature
	}
	return tok, nil
}

// unroutedSignedFile answers a signed /files URL that names no sandbox:
// the SDK builds one from E2B_SANDBOX_URL when that is set, which routes
// by headers a plain fetch of the URL does not send. An expired signature
// is refused as such (it is refused before any lookup wherever it is
// sent); any other is told the URL needs the sandbox in its host.
func unroutedSignedFile(r *http.Request) (bool, error) {
	if r.URL.Path != "/files" || (r.Method != http.MethodGet && r.Method != http.MethodPost) {
		return false, nil
	}
	q := r.URL.Query()
	if _, ok := q["signature"]; !ok {
		return false, nil
	}
	if _, err := signedExpiry(q, time.Now()); err != nil {
		return true, err
	}
	return true, errdefs.Invalid("a signed file URL names its sandbox in its host ({port}-{sandboxID}.{domain}: serve the door with --e2b-domain and set E2B_DOMAIN, not E2B_SANDBOX_URL)")
}
