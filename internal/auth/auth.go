// Package auth authenticates API callers. It is the single seam through
// which every request's identity flows: callers on the root-only unix
// socket are the host's administrator; callers over TCP present a bearer
// API key, of which only a SHA-256 hash is stored, or a sandbox's lease
// token. Authorize decides, from a route's Rule alone, whether a principal
// may call it. Tenancy and roles grow here without touching handlers.
package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

// Principal is an authenticated caller.
type Principal struct {
	Actor string // recorded in events: "local", "key:<id>" or "lease:<sandbox id>"
	// Sandbox, for a lease token, is the one sandbox it may act on.
	Sandbox string
	KeyID   string
	Tenant  string
	Scopes  []string
}

// Admin is the principal of the local unix socket.
var Admin = Principal{Actor: "local", Scopes: []string{string(ScopeAdmin)}}

// KeyPrefix starts every berth API key, so leaked keys are recognisable.
const KeyPrefix = "berth_"

// AdminKeyFile is the file, in the data dir, holding the bootstrap admin key.
const AdminKeyFile = "admin.key"

type ctxKey struct{}

// With returns ctx carrying p.
func With(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// From returns the principal in ctx.
func From(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}

// Hash returns the stored form of a key.
func Hash(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:]
}

// NewKey returns a fresh random key and its id.
func NewKey() (id, key string) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	enc := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
	return enc[:8], KeyPrefix + enc
}

// Authenticator checks bearer keys against the store, and lease tokens.
type Authenticator struct {
	st     store.APIKeys
	leases *Leases
}

// New returns an Authenticator over st; leases may be nil (no lease tokens).
func New(st store.APIKeys, leases *Leases) *Authenticator {
	return &Authenticator{st: st, leases: leases}
}

// Authenticate resolves a bearer key to a principal.
func (a *Authenticator) Authenticate(ctx context.Context, key string) (Principal, error) {
	if key == "" {
		return Principal{}, errdefs.Unauthenticated("an API key is required: pass --api-key or set BERTH_API_KEY")
	}
	if a.leases != nil && strings.HasPrefix(key, LeasePrefix) {
		id, ok := a.leases.Check(key)
		if !ok {
			return Principal{}, errdefs.Unauthenticated("invalid lease token")
		}
		return Principal{Actor: "lease:" + id, Sandbox: id}, nil
	}
	if !strings.HasPrefix(key, KeyPrefix) || len(key) > 128 {
		return Principal{}, errdefs.Unauthenticated("invalid API key")
	}
	h := Hash(key)
	k, err := a.st.GetAPIKeyByHash(ctx, h)
	if errors.Is(err, errdefs.ErrNotFound) {
		return Principal{}, errdefs.Unauthenticated("invalid API key")
	} else if err != nil {
		return Principal{}, err
	}
	if subtle.ConstantTimeCompare(k.Hash, h) != 1 || !k.RevokedAt.IsZero() {
		return Principal{}, errdefs.Unauthenticated("invalid or revoked API key")
	}
	return Principal{Actor: "key:" + k.ID, KeyID: k.ID, Tenant: k.Tenant, Scopes: k.Scopes}, nil
}

// Bootstrap creates the admin key on a daemon's first start and writes it,
// mode 0600, into dataDir. It does nothing if any key exists.
func Bootstrap(ctx context.Context, st store.APIKeys, dataDir string, now time.Time) (created bool, err error) {
	keys, _, err := st.ListAPIKeys(ctx, store.AnyOwner, store.Page{Limit: 1})
	if err != nil {
		return false, err
	}
	if len(keys) > 0 {
		return false, nil
	}
	id, key := NewKey()
	path := filepath.Join(dataDir, AdminKeyFile)
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return false, fmt.Errorf("writing admin key: %w", err)
	}
	if err := st.CreateAPIKey(ctx, &store.APIKey{
		ID: id, Name: "bootstrap-admin", Hash: Hash(key), Scopes: []string{string(ScopeAdmin)}, CreatedAt: now,
	}); err != nil {
		os.Remove(path)
		return false, err
	}
	return true, nil
}

// LeasePrefix starts every lease token.
const LeasePrefix = "berth_lease_"

// LeaseKeyFile holds the key lease tokens are signed with.
const LeaseKeyFile = "lease.key"

// Leases mints and checks lease tokens: credentials that act on one
// sandbox only. A token is the sandbox id with an HMAC of it under a key
// kept in the data dir; nothing is stored per token, and it dies with its
// sandbox because the server refuses tokens of sandboxes that are gone.
type Leases struct{ key []byte }

// OpenLeases loads (creating on first use) the lease key in dataDir.
func OpenLeases(dataDir string) (*Leases, error) {
	path := filepath.Join(dataDir, LeaseKeyFile)
	key, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, key, 0o600); err != nil {
			return nil, fmt.Errorf("writing lease key: %w", err)
		}
	} else if err != nil {
		return nil, err
	}
	if len(key) < 32 {
		return nil, fmt.Errorf("lease key %s is too short", path)
	}
	return &Leases{key: key}, nil
}

func (l *Leases) mac(id string) string {
	m := hmac.New(sha256.New, l.key)
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))[:40]
}

// Token returns the lease token of sandbox id.
func (l *Leases) Token(id string) string { return LeasePrefix + id + "_" + l.mac(id) }

// Check returns the sandbox id a lease token is for.
func (l *Leases) Check(token string) (string, bool) {
	rest, ok := strings.CutPrefix(token, LeasePrefix)
	if !ok {
		return "", false
	}
	id, mac, ok := strings.Cut(rest, "_")
	if !ok || id == "" {
		return "", false
	}
	return id, hmac.Equal([]byte(mac), []byte(l.mac(id)))
}
