// Package auth authenticates API callers. It is the single seam through
// which every request's identity flows: callers on the root-only unix
// socket are the host's administrator; callers over TCP present a bearer
// API key, of which only a SHA-256 hash is stored, or a sandbox's lease
// token. Authorize decides, from a route's Rule alone, whether a principal
// may call it. Tenancy and roles grow here without touching handlers.
//
// API keys are berth_ and 52 base32 characters; the store keeps the hash,
// the printable prefix berth_<id>, a role (viewer, member, admin), the
// scopes held within the role and its creator's (sandboxes:read,
// sandboxes:write, exec, files, ports, network, templates, secrets, keys,
// audit, and admin, which holds them all) and an optional expiry, checked
// with revocation on every request. A key of the host (tenant "", holding
// admin: the bootstrap key, written 0600 into the data dir at first start)
// is the host admin too (Principal.Host).
//
// Authorize(principal, rule, id) decides from a route's Rule (public, or the
// scopes it needs; whether a lease may call it; whether it is the host's
// alone) and the route's decoded {id}, never from the request: a lease only
// on the routes marked for leases, only with its own sandbox's id, and only
// for the scopes its record holds (within LeaseScopes; never network or
// admin). Grant, LeaseGrant and CreateLeaseGrant say what a new key, a
// minted lease or a create's lease may hold; MayActOn whether a caller may
// revoke a key (only one holding nothing the caller lacks); Recheck
// re-decides an earlier principal for the connections bound to it.
//
// Leases signs and checks lease tokens (berth_lease_<sandbox>_<lease
// id>_<HMAC>) and port tokens (berth_port_<sandbox>_<port>_<expiry>_<token
// id>_<HMAC>), each naming a row of the store, with HMAC-SHA256 under a key
// in the data dir (or serve --token-key-file, shared by replicas:
// OpenLeasesFile), compared in constant time. FuzzValidKey, FuzzLeaseToken,
// FuzzPortToken. Tenancy, leases and port tokens as the API sees them:
// docs/api.md.
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
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/keyfile"
	"github.com/berth-sh/berth/internal/store"
)

// Principal is an authenticated caller.
type Principal struct {
	Actor string // recorded in events: "local", "key:<id>", "lease:<sandbox id>" or "port:<sandbox id>"
	// Sandbox, for a lease or port token, is the one sandbox it may act on.
	Sandbox string
	// LeaseID is the lease record of a lease token.
	LeaseID string
	// Port, for a port token, is the one port it opens; PortTokenID its
	// record.
	Port        int
	PortTokenID string
	KeyID       string
	Tenant      string
	Scopes      []string
	// Host marks the host's administrator (the unix socket, a key of the
	// host — tenant "" — holding admin): above tenants, it sees every
	// tenant's objects and alone may call the host routes (Rule.Host).
	Host bool
}

// Admin is the principal of the local unix socket.
var Admin = Principal{Actor: "local", Scopes: []string{string(ScopeAdmin)}, Host: true}

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

// keyIDLen is how many characters of a key's secret are its id: the
// printable prefix is KeyPrefix and the id.
const keyIDLen = 12

// NewKey returns a fresh random key and its id: "berth_" and 52 lowercase
// base32 characters (256 random bits), of which the first 12 are the id.
func NewKey() (id, key string) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	enc := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
	return enc[:keyIDLen], KeyPrefix + enc
}

// PrefixOf is the printable, non-secret prefix of a key with id.
func PrefixOf(id string) string { return KeyPrefix + id }

// ValidKey checks the form of a presented API key before any store read:
// KeyPrefix then 52 characters of lowercase base32, the form NewKey makes.
func ValidKey(key string) bool {
	rest, ok := strings.CutPrefix(key, KeyPrefix)
	if !ok || len(rest) != 52 {
		return false
	}
	for i := range len(rest) {
		c := rest[i]
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// Store is what authentication reads: keys, and the lease and port token
// records.
type Store interface {
	store.APIKeys
	GetLease(ctx context.Context, id string) (*store.Lease, error)
	GetPortToken(ctx context.Context, o store.Owner, id string) (*store.PortToken, error)
}

// Authenticator checks bearer keys against the store, and lease and port
// tokens.
type Authenticator struct {
	st     Store
	leases *Leases
	// Now is the clock keys and tokens expire by (time.Now if nil).
	Now func() time.Time
}

// New returns an Authenticator over st; leases may be nil (no lease tokens).
func New(st Store, leases *Leases) *Authenticator {
	return &Authenticator{st: st, leases: leases}
}

func (a *Authenticator) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// Authenticate resolves a bearer key or lease token to a principal. A
// revoked or expired key, and a lease that is revoked, expired or whose
// minting key is, is refused on its next request: nothing is cached.
func (a *Authenticator) Authenticate(ctx context.Context, key string) (Principal, error) {
	if key == "" {
		return Principal{}, errdefs.Unauthenticated("an API key is required: pass --api-key or set BERTH_API_KEY")
	}
	if strings.HasPrefix(key, LeasePrefix) {
		return a.lease(ctx, key)
	}
	if strings.HasPrefix(key, PortTokenPrefix) {
		return Principal{}, errdefs.Unauthenticated("a port token opens its port only, in the %s query parameter or cookie", PortTokenParam)
	}
	if !ValidKey(key) {
		return Principal{}, errdefs.Unauthenticated("invalid API key")
	}
	k, err := a.key(ctx, func() (*store.APIKey, error) { return a.st.GetAPIKeyByHash(ctx, Hash(key)) })
	if err != nil {
		return Principal{}, err
	}
	if subtle.ConstantTimeCompare(k.Hash, Hash(key)) != 1 {
		return Principal{}, errdefs.Unauthenticated("invalid API key")
	}
	return Principal{Actor: "key:" + k.ID, KeyID: k.ID, Tenant: k.Tenant, Scopes: k.Scopes,
		Host: k.Tenant == "" && slices.Contains(k.Scopes, string(ScopeAdmin))}, nil
}

// key reads a key and refuses it if revoked or expired.
func (a *Authenticator) key(ctx context.Context, get func() (*store.APIKey, error)) (*store.APIKey, error) {
	k, err := get()
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.Unauthenticated("invalid API key")
	} else if err != nil {
		return nil, err
	}
	if !k.RevokedAt.IsZero() {
		return nil, errdefs.Unauthenticated("the API key %s was revoked", PrefixOf(k.ID))
	}
	if !k.ExpiresAt.IsZero() && !a.now().Before(k.ExpiresAt) {
		return nil, errdefs.Unauthenticated("the API key %s expired at %s", PrefixOf(k.ID), k.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return k, nil
}

func (a *Authenticator) lease(ctx context.Context, token string) (Principal, error) {
	bad := errdefs.Unauthenticated("invalid lease token")
	if a.leases == nil {
		return Principal{}, bad
	}
	sb, id, ok := a.leases.Check(token)
	if !ok {
		return Principal{}, bad
	}
	l, err := a.leaseRecord(ctx, sb, id)
	if err != nil {
		return Principal{}, err
	}
	return Principal{Actor: "lease:" + sb, Sandbox: sb, LeaseID: l.ID, Tenant: l.Tenant, Scopes: l.Scopes}, nil
}

// leaseRecord reads lease id of sandbox sb and refuses it if revoked,
// expired, or its minting key is.
func (a *Authenticator) leaseRecord(ctx context.Context, sb, id string) (*store.Lease, error) {
	bad := errdefs.Unauthenticated("invalid lease token")
	l, err := a.st.GetLease(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, bad
	} else if err != nil {
		return nil, err
	}
	switch {
	case l.SandboxID != sb:
		return nil, bad
	case !l.RevokedAt.IsZero():
		return nil, errdefs.Unauthenticated("the lease token was revoked")
	case !l.ExpiresAt.IsZero() && !a.now().Before(l.ExpiresAt):
		return nil, errdefs.Unauthenticated("the lease token expired")
	}
	if err := a.minter(ctx, l.KeyID, "lease token"); err != nil {
		return nil, err
	}
	return l, nil
}

// minter checks the key a token was minted with ("" the host socket,
// which does not end): a token dies with its key.
func (a *Authenticator) minter(ctx context.Context, keyID, what string) error {
	if keyID == "" {
		return nil
	}
	_, err := a.key(ctx, func() (*store.APIKey, error) { return a.st.GetAPIKey(ctx, store.AnyOwner, keyID) })
	if err != nil {
		if _, status := errdefs.Code(err); status == 401 {
			return errdefs.Unauthenticated("the %s ended with the key that minted it", what)
		}
		return err
	}
	return nil
}

// CheckPort resolves a port token presented for sandbox id's port: valid
// only there, before its expiry, until it is revoked, while the key that
// minted it is.
func (a *Authenticator) CheckPort(ctx context.Context, token, id string, port int) (Principal, error) {
	bad := errdefs.Unauthenticated("invalid port token")
	if a.leases == nil {
		return Principal{}, bad
	}
	t, ok := a.leases.CheckPort(token)
	if !ok || t.Sandbox != id || t.Port != port {
		return Principal{}, bad
	}
	rec, err := a.portRecord(ctx, t)
	if err != nil {
		return Principal{}, err
	}
	return Principal{Actor: "port:" + id, Sandbox: id, Port: port, PortTokenID: rec.ID, Tenant: rec.Tenant,
		Scopes: []string{string(ScopePorts)}}, nil
}

// portRecord reads the record of port token t and refuses it if it does
// not match t, or is revoked, expired, or its minting key is.
func (a *Authenticator) portRecord(ctx context.Context, t PortToken) (*store.PortToken, error) {
	bad := errdefs.Unauthenticated("invalid port token")
	rec, err := a.st.GetPortToken(ctx, store.AnyOwner, t.ID)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, bad
	} else if err != nil {
		return nil, err
	}
	switch {
	case rec.SandboxID != t.Sandbox || rec.Port != t.Port:
		return nil, bad
	case !rec.RevokedAt.IsZero():
		return nil, errdefs.Unauthenticated("the port token was revoked")
	case !a.now().Before(rec.ExpiresAt) || !a.now().Before(t.Expires):
		return nil, errdefs.Unauthenticated("the port token expired")
	}
	if err := a.minter(ctx, rec.KeyID, "port token"); err != nil {
		return nil, err
	}
	return rec, nil
}

// Recheck decides whether p, authenticated earlier, still is: its port
// token, lease or key not revoked nor expired, nor the key that minted
// the token. The host socket's administrator and anonymous callers never
// end. It is what a long-lived connection is held to (the server's
// bindings).
func (a *Authenticator) Recheck(ctx context.Context, p Principal) error {
	switch {
	case p.PortTokenID != "":
		rec, err := a.st.GetPortToken(ctx, store.AnyOwner, p.PortTokenID)
		if errors.Is(err, errdefs.ErrNotFound) {
			return errdefs.Unauthenticated("invalid port token")
		} else if err != nil {
			return err
		}
		_, err = a.portRecord(ctx, PortToken{ID: rec.ID, Sandbox: p.Sandbox, Port: p.Port, Expires: rec.ExpiresAt})
		return err
	case p.LeaseID != "":
		_, err := a.leaseRecord(ctx, p.Sandbox, p.LeaseID)
		return err
	case p.KeyID != "":
		_, err := a.key(ctx, func() (*store.APIKey, error) { return a.st.GetAPIKey(ctx, store.AnyOwner, p.KeyID) })
		return err
	}
	return nil
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
		ID: id, Name: "bootstrap-admin", Hash: Hash(key), Role: string(RoleAdmin), Scopes: []string{string(ScopeAdmin)},
		CreatedAt: now, Prefix: PrefixOf(id), CreatedBy: "bootstrap",
	}); err != nil {
		os.Remove(path)
		return false, err
	}
	return true, nil
}

// LeasePrefix starts every lease token.
const LeasePrefix = "berth_lease_"

// PortTokenPrefix starts every port token; PortTokenParam is the query
// parameter and cookie that carry one.
const (
	PortTokenPrefix = "berth_port_"
	PortTokenParam  = "berth_port_token"
)

// LeaseKeyFile holds the key lease and port tokens are signed with.
const LeaseKeyFile = "lease.key"

// Leases signs and checks lease and port tokens. A lease token is
// berth_lease_<sandbox>_<lease id>_<HMAC>: the lease record (store.Lease)
// says what it may do and whether it still may. A port token is
// berth_port_<sandbox>_<port>_<expiry>_<token id>_<HMAC>: its record
// (store.PortToken) says whether it still opens its port, and it needs its
// sandbox live and its minting key valid. Each HMAC-SHA256 is
// over a domain tag and the fields, compared in constant time.
type Leases struct{ key []byte }

// OpenLeasesFile loads the token key the operator shares between the
// replicas of one store (serve --token-key-file), so a lease or port token
// minted by one is accepted by all. It is never made here.
func OpenLeasesFile(path string) (*Leases, error) {
	key, err := keyfile.Read(path, "token key")
	if err != nil {
		return nil, err
	}
	return &Leases{key: key}, nil
}

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

func (l *Leases) mac(fields ...string) string {
	m := hmac.New(sha256.New, l.key)
	for _, f := range fields {
		m.Write([]byte(f))
		m.Write([]byte{0})
	}
	return hex.EncodeToString(m.Sum(nil))
}

// CreateLeaseID is the id of the lease a sandbox's create hands out: one
// per sandbox, so the create's answer can be replayed with the same token.
func CreateLeaseID(sandbox string) string { return "c-" + sandbox }

// NewLeaseID returns a fresh random lease id.
func NewLeaseID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return "l-" + hex.EncodeToString(b[:])
}

// Token returns the token of sandbox's create-time lease.
func (l *Leases) Token(sandbox string) string { return l.LeaseToken(sandbox, CreateLeaseID(sandbox)) }

// LeaseToken returns the token of lease id of sandbox.
func (l *Leases) LeaseToken(sandbox, id string) string {
	return LeasePrefix + sandbox + "_" + id + "_" + l.mac("lease", sandbox, id)
}

// tokenField reports whether f may be a token's id field: 1 to 64 of
// lowercase letters, digits and '-'.
func tokenField(f string) bool {
	if f == "" || len(f) > 64 {
		return false
	}
	for i := range len(f) {
		c := f[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// Check returns the sandbox and lease id a lease token names, if its
// HMAC is this daemon's.
func (l *Leases) Check(token string) (sandbox, id string, ok bool) {
	rest, ok := strings.CutPrefix(token, LeasePrefix)
	if !ok || len(rest) > 256 {
		return "", "", false
	}
	f := strings.Split(rest, "_")
	if len(f) != 3 || !tokenField(f[0]) || !tokenField(f[1]) {
		return "", "", false
	}
	if !hmac.Equal([]byte(f[2]), []byte(l.mac("lease", f[0], f[1]))) {
		return "", "", false
	}
	return f[0], f[1], true
}

// PortToken is what a port token names: its record (store.PortToken)
// says whether it still opens its port.
type PortToken struct {
	Sandbox string
	Port    int
	Expires time.Time
	ID      string // the record's id
}

// NewPortTokenID returns a fresh random port token id.
func NewPortTokenID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return "p-" + hex.EncodeToString(b[:])
}

// portTag is the HMAC domain of port tokens that name a record.
const portTag = "port-record"

// MintPort returns the token of t (its expiry to the second).
func (l *Leases) MintPort(t PortToken) string {
	port, exp := strconv.Itoa(t.Port), strconv.FormatInt(t.Expires.Unix(), 10)
	return PortTokenPrefix + t.Sandbox + "_" + port + "_" + exp + "_" + t.ID + "_" + l.mac(portTag, t.Sandbox, port, exp, t.ID)
}

// CheckPort parses a port token and checks its HMAC; the caller checks
// the sandbox, port, expiry and record.
func (l *Leases) CheckPort(token string) (PortToken, bool) {
	rest, ok := strings.CutPrefix(token, PortTokenPrefix)
	if !ok || len(rest) > 256 {
		return PortToken{}, false
	}
	f := strings.Split(rest, "_")
	if len(f) != 5 || !tokenField(f[0]) || !tokenField(f[3]) {
		return PortToken{}, false
	}
	port, err := strconv.Atoi(f[1])
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != f[1] {
		return PortToken{}, false
	}
	exp, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || exp <= 0 || strconv.FormatInt(exp, 10) != f[2] {
		return PortToken{}, false
	}
	if !hmac.Equal([]byte(f[4]), []byte(l.mac(portTag, f[0], f[1], f[2], f[3]))) {
		return PortToken{}, false
	}
	return PortToken{Sandbox: f[0], Port: port, Expires: time.Unix(exp, 0), ID: f[3]}, true
}
