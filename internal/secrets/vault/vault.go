// Package vault is the daemon's service over sealed secrets: it seals on
// put, opens on resolve and re-wraps on rotation, between a master keyring
// it holds in memory and a store.Secrets. Values leave it only through
// Resolve, to the engine, on their way into a sandbox.
//
// Rotate adds the new key and writes it to the key file before anything is
// re-wrapped, and drops the old one only after: a crash between leaves a
// keyring that opens every row. Re-wrapping runs in batches
// (store.SecretsNotUnder, then store.RewrapSecret, a compare-and-swap on the
// wrapped key, so a concurrent put wins).
package vault

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/secrets"
	"github.com/berth-sh/berth/internal/store"
)

// Vault seals, stores, resolves and re-wraps secrets. Safe for concurrent
// use.
type Vault struct {
	st  store.Secrets
	now func() time.Time

	mu sync.RWMutex
	kr *secrets.Keyring
}

// New returns a vault over st with the keyring kr.
func New(st store.Secrets, kr *secrets.Keyring) *Vault {
	return &Vault{st: st, kr: kr, now: time.Now}
}

func (v *Vault) keyring() *secrets.Keyring {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.kr
}

// SetKeyring replaces the keyring (a rotation adds the new key first and
// keeps the old after it until Rewrap has left nothing under it).
func (v *Vault) SetKeyring(kr *secrets.Keyring) {
	v.mu.Lock()
	v.kr = kr
	v.mu.Unlock()
}

// KeyIDs are the held master keys' ids, primary first.
func (v *Vault) KeyIDs() []string { return v.keyring().IDs() }

// Put seals value as tenant's secret name; it reports whether it is new.
func (v *Vault) Put(ctx context.Context, tenant, name string, value []byte) (*store.Secret, bool, error) {
	if err := secrets.CheckName(name); err != nil {
		return nil, false, err
	}
	if len(value) == 0 {
		return nil, false, errdefs.Invalid("secret %s: the value is empty", name)
	}
	sealed, err := v.keyring().Seal(tenant, name, value)
	if err != nil {
		return nil, false, err
	}
	now := v.now()
	sec := &store.Secret{Tenant: tenant, Name: name, Sealed: sealed, CreatedAt: now, UpdatedAt: now}
	created, err := v.st.PutSecret(ctx, sec)
	if err != nil {
		return nil, false, err
	}
	if !created {
		if got, err := v.st.GetSecret(ctx, store.OwnedBy(tenant), name); err == nil {
			sec.CreatedAt = got.CreatedAt
		}
	}
	sec.Sealed = secrets.Sealed{KeyID: sealed.KeyID}
	return sec, created, nil
}

// List returns a page of tenant's secrets, without values.
func (v *Vault) List(ctx context.Context, tenant string, p store.Page) ([]*store.Secret, string, error) {
	return v.st.ListSecrets(ctx, store.OwnedBy(tenant), p)
}

// Delete removes tenant's secret name.
func (v *Vault) Delete(ctx context.Context, tenant, name string) error {
	if err := secrets.CheckName(name); err != nil {
		return err
	}
	return v.st.DeleteSecret(ctx, store.OwnedBy(tenant), name)
}

// Exists reports nil if tenant has secret name, ErrNotFound if not.
func (v *Vault) Exists(ctx context.Context, tenant, name string) error {
	_, err := v.st.GetSecret(ctx, store.OwnedBy(tenant), name)
	return err
}

// Resolve opens tenant's secret name. A missing secret is ErrNotFound
// (a revoked one: the caller stops injecting it).
func (v *Vault) Resolve(ctx context.Context, tenant, name string) ([]byte, error) {
	sec, err := v.st.GetSecret(ctx, store.OwnedBy(tenant), name)
	if err != nil {
		return nil, err
	}
	return v.keyring().Open(tenant, name, sec.Sealed)
}

// Rewrap re-wraps, in batches, every secret whose data key is not under
// the primary key, and returns how many it changed. A secret replaced
// meanwhile is already under the primary key and is skipped. Values are
// never decrypted.
func (v *Vault) Rewrap(ctx context.Context) (int, error) {
	kr := v.keyring()
	primary := kr.Primary().ID
	n := 0
	for {
		batch, err := v.st.SecretsNotUnder(ctx, primary, 100)
		if err != nil {
			return n, err
		}
		if len(batch) == 0 {
			return n, nil
		}
		progress := false
		for _, sec := range batch {
			nw, changed, err := kr.Rewrap(sec.Sealed)
			if err != nil {
				return n, fmt.Errorf("re-wrap secret %s of tenant %q: %w", sec.Name, sec.Tenant, err)
			}
			if !changed {
				continue
			}
			if err := failpoint.Inject("secrets.rewrap"); err != nil {
				return n, err
			}
			upd := *sec
			upd.Sealed = nw
			switch err := v.st.RewrapSecret(ctx, &upd, sec.Sealed); {
			case err == nil:
				n++
				progress = true
			case errors.Is(err, errdefs.ErrConflict):
				progress = true // replaced or deleted meanwhile: look again
			default:
				return n, err
			}
		}
		if !progress {
			return n, fmt.Errorf("re-wrap made no progress")
		}
	}
}
