package store

import (
	"context"
	"time"

	"github.com/berth-sh/berth/internal/secrets"
)

// Secret is a tenant's named secret as stored: sealed, never in clear.
type Secret struct {
	Tenant string
	Name   string
	// Sealed is the value's ciphertext, nonce, wrapped data key and master
	// key id. Lists leave it empty.
	Sealed    secrets.Sealed
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Secrets are the tenants' sealed secrets.
type Secrets interface {
	// PutSecret inserts or replaces (tenant, name); a replace keeps the
	// first CreatedAt. It reports whether the secret is new.
	PutSecret(ctx context.Context, s *Secret) (created bool, err error)
	// GetSecret returns one secret with its sealed value.
	GetSecret(ctx context.Context, o Owner, name string) (*Secret, error)
	// ListSecrets returns a page of names and times ordered by name; the
	// sealed values are not read.
	ListSecrets(ctx context.Context, o Owner, p Page) ([]*Secret, string, error)
	DeleteSecret(ctx context.Context, o Owner, name string) error
	// SecretsNotUnder returns up to limit secrets, with sealed values, whose
	// data key is wrapped by another master key than keyID (every tenant's:
	// rotation is the daemon's work).
	SecretsNotUnder(ctx context.Context, keyID string, limit int) ([]*Secret, error)
	// SecretKeyIDs lists the master key ids the stored secrets are sealed
	// under (every tenant's), each once: a daemon refuses to start without
	// one of them.
	SecretKeyIDs(ctx context.Context) ([]string, error)
	// RewrapSecret stores s's new wrapped key and key id if the stored row
	// still has prev's wrapped key (compare-and-swap), else ErrConflict: a
	// put in between wrote a new data key.
	RewrapSecret(ctx context.Context, s *Secret, prev secrets.Sealed) error
}
