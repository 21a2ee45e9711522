package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/secrets"
	"github.com/berth-sh/berth/internal/store"
)

func sealedFor(t *testing.T, kr *secrets.Keyring, tenant, name, value string) secrets.Sealed {
	t.Helper()
	s, err := kr.Seal(tenant, name, []byte(value))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testSecrets(t *testing.T, s store.Store) {
	ctx := context.Background()
	k1, _ := secrets.NewKey()
	k2, _ := secrets.NewKey()
	kr1, _ := secrets.NewKeyring(k1)
	both, _ := secrets.NewKeyring(k2, k1)

	sec := &store.Secret{Tenant: "t", Name: "TOKEN", Sealed: sealedFor(t, kr1, "t", "TOKEN", "v1"), CreatedAt: at(0), UpdatedAt: at(0)}
	if created, err := s.PutSecret(ctx, sec); err != nil || !created {
		t.Fatalf("put: %v %v", created, err)
	}
	// Replace keeps CreatedAt, takes the new value.
	sec2 := &store.Secret{Tenant: "t", Name: "TOKEN", Sealed: sealedFor(t, kr1, "t", "TOKEN", "v2"), CreatedAt: at(time.Hour), UpdatedAt: at(time.Hour)}
	if created, err := s.PutSecret(ctx, sec2); err != nil || created {
		t.Fatalf("replace: %v %v", created, err)
	}
	got, err := s.GetSecret(ctx, store.OwnedBy("t"), "TOKEN")
	if err != nil || !got.CreatedAt.Equal(stored(at(0))) || !got.UpdatedAt.Equal(stored(at(time.Hour))) {
		t.Fatalf("get: %+v %v", got, err)
	}
	if v, err := kr1.Open("t", "TOKEN", got.Sealed); err != nil || string(v) != "v2" {
		t.Fatalf("stored value: %q %v", v, err)
	}
	// Owner isolation: another tenant's name is not found, nor listed, nor deletable.
	if _, err := s.GetSecret(ctx, store.OwnedBy("u"), "TOKEN"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("other tenant get: %v", err)
	}
	if err := s.DeleteSecret(ctx, store.OwnedBy("u"), "TOKEN"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("other tenant delete: %v", err)
	}
	if _, err := s.PutSecret(ctx, &store.Secret{Tenant: "u", Name: "TOKEN", Sealed: sealedFor(t, kr1, "u", "TOKEN", "u1"), CreatedAt: at(0), UpdatedAt: at(0)}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"B", "A", "C"} {
		if _, err := s.PutSecret(ctx, &store.Secret{Tenant: "t", Name: n, Sealed: sealedFor(t, kr1, "t", n, n), CreatedAt: at(0), UpdatedAt: at(0)}); err != nil {
			t.Fatal(err)
		}
	}
	// Paged by name, never carrying values.
	var names []string
	cursor := ""
	for {
		page, next, err := s.ListSecrets(ctx, store.OwnedBy("t"), store.Page{Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range page {
			if p.Tenant != "t" || len(p.Sealed.Ciphertext) != 0 || len(p.Sealed.WrappedKey) != 0 {
				t.Fatalf("list row carries another tenant or a sealed value: %+v", p)
			}
			names = append(names, p.Name)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if want := []string{"A", "B", "C", "TOKEN"}; !equalStrings(names, want) {
		t.Fatalf("list = %v, want %v", names, want)
	}
	if _, _, err := s.ListSecrets(ctx, store.AnyOwner, store.Page{}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("list for any owner: %v", err)
	}
	if _, err := s.PutSecret(ctx, &store.Secret{Tenant: "t", Name: "bad-name", Sealed: got.Sealed}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("bad name: %v", err)
	}
	if _, err := s.PutSecret(ctx, &store.Secret{Tenant: "t", Name: "EMPTY"}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("no sealed value: %v", err)
	}

	if ids, err := s.SecretKeyIDs(ctx); err != nil || !equalStrings(ids, []string{k1.ID}) {
		t.Fatalf("key ids before rotation: %v %v, want [%s]", ids, err, k1.ID)
	}
	// Rotation: every row not under k2 is re-wrapped, compare-and-swap on
	// the wrapped key; a put in between wins.
	todo, err := s.SecretsNotUnder(ctx, k2.ID, 100)
	if err != nil || len(todo) != 5 {
		t.Fatalf("to re-wrap: %d %v", len(todo), err)
	}
	for _, old := range todo {
		nw, changed, err := both.Rewrap(old.Sealed)
		if err != nil || !changed {
			t.Fatal(err)
		}
		upd := *old
		upd.Sealed = nw
		if old.Name == "A" {
			// A concurrent put replaced A: the re-wrap of the old row is refused.
			if _, err := s.PutSecret(ctx, &store.Secret{Tenant: "t", Name: "A", Sealed: sealedFor(t, both, "t", "A", "A2"), CreatedAt: at(0), UpdatedAt: at(time.Minute)}); err != nil {
				t.Fatal(err)
			}
			if err := s.RewrapSecret(ctx, &upd, old.Sealed); !errors.Is(err, errdefs.ErrConflict) {
				t.Fatalf("stale re-wrap: %v", err)
			}
			continue
		}
		if err := s.RewrapSecret(ctx, &upd, old.Sealed); err != nil {
			t.Fatal(err)
		}
	}
	if left, err := s.SecretsNotUnder(ctx, k2.ID, 100); err != nil || len(left) != 0 {
		t.Fatalf("left after rotation: %d %v", len(left), err)
	}
	if ids, err := s.SecretKeyIDs(ctx); err != nil || !equalStrings(ids, []string{k2.ID}) {
		t.Fatalf("key ids after rotation: %v %v, want [%s]", ids, err, k2.ID)
	}
	kr2, _ := secrets.NewKeyring(k2)
	for tenant, names := range map[string][]string{"t": {"A", "B", "C", "TOKEN"}, "u": {"TOKEN"}} {
		for _, n := range names {
			g, err := s.GetSecret(ctx, store.OwnedBy(tenant), n)
			if err != nil {
				t.Fatal(err)
			}
			v, err := kr2.Open(tenant, n, g.Sealed)
			if err != nil || len(v) == 0 || g.Sealed.KeyID != k2.ID {
				t.Fatalf("%s/%s after rotation: %q %v", tenant, n, v, err)
			}
		}
	}
	if err := s.DeleteSecret(ctx, store.OwnedBy("t"), "TOKEN"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSecret(ctx, store.OwnedBy("t"), "TOKEN"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("deleted: %v", err)
	}
	if err := s.DeleteSecret(ctx, store.OwnedBy("t"), "TOKEN"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	if _, err := s.GetSecret(ctx, store.OwnedBy("u"), "TOKEN"); err != nil {
		t.Fatalf("other tenant's survives: %v", err)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
