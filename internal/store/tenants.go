package store

import (
	"context"
	"time"
)

// Tenant is an owner of objects: sandboxes, volumes, snapshots, keys and
// leases name it in their tenant column. The host's own objects have the
// tenant "", which is not a Tenant record.
type Tenant struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// Lease is a minted lease token's record: the token carries its id under
// the daemon's HMAC, the record what it may do and whether it still may.
type Lease struct {
	ID        string
	SandboxID string
	Tenant    string
	// KeyID is the API key that minted it ("" for the host socket): its
	// revocation revokes the lease.
	KeyID     string
	Scopes    []string
	CreatedAt time.Time
	ExpiresAt time.Time // zero: lives with its sandbox
	RevokedAt time.Time
}

// PortToken is a minted port token's record: the token carries its id
// under the daemon's HMAC, the record which port of which sandbox it
// opens, who minted it, until when, and whether it still may.
type PortToken struct {
	ID        string
	SandboxID string
	Tenant    string
	Port      int
	// KeyID is the API key that minted it ("" for the host socket): its
	// revocation revokes the token.
	KeyID     string
	CreatedBy string // the minting actor, as events record it
	CreatedAt time.Time
	ExpiresAt time.Time
	RevokedAt time.Time
}

// Tenants are the tenants and the leases and port tokens their sandboxes
// hand out.
type Tenants interface {
	// CreateTenant adds t; a taken name is ErrConflict.
	CreateTenant(ctx context.Context, t *Tenant) error
	GetTenant(ctx context.Context, name string) (*Tenant, error)
	// ListTenants returns every tenant by name.
	ListTenants(ctx context.Context) ([]*Tenant, error)
	// DeleteTenant removes tenant name and revokes its keys and leases at
	// at, in one transaction; ErrConflict (nothing changed) while it owns
	// a live sandbox, a live volume or a snapshot.
	DeleteTenant(ctx context.Context, name string, at time.Time) error

	// CreateLease records l; an id taken is ErrConflict.
	CreateLease(ctx context.Context, l *Lease) error
	// GetLease returns lease id, revoked or not.
	GetLease(ctx context.Context, id string) (*Lease, error)
	// RevokeLease revokes lease id at at (idempotent: a revoked lease
	// keeps its first time); another owner's is not found.
	RevokeLease(ctx context.Context, o Owner, id string, at time.Time) error
	// RevokeLeases revokes, at at, every lease of sandbox id not yet
	// revoked but those named in keep, and says how many.
	RevokeLeases(ctx context.Context, sandboxID string, at time.Time, keep ...string) (int64, error)

	// CreatePortToken records t; an id taken is ErrConflict.
	CreatePortToken(ctx context.Context, t *PortToken) error
	// GetPortToken returns port token id, revoked or not; another owner's
	// is not found.
	GetPortToken(ctx context.Context, o Owner, id string) (*PortToken, error)
	// ListPortTokens returns every port token of sandbox id o sees, by
	// creation.
	ListPortTokens(ctx context.Context, o Owner, sandboxID string) ([]*PortToken, error)
	// RevokePortToken revokes port token id at at (idempotent); another
	// owner's is not found.
	RevokePortToken(ctx context.Context, o Owner, id string, at time.Time) error
}
