package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// testTenants: create (a taken name is a conflict), get, list by name,
// and delete, which refuses while the tenant owns a live sandbox, volume
// or snapshot and revokes its keys and leases when it goes.
func testTenants(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, n := range []string{"zeta", "acme"} {
		must(t, s.CreateTenant(ctx, &store.Tenant{Name: n, CreatedAt: at(0)}))
	}
	wantCategory(t, s.CreateTenant(ctx, &store.Tenant{Name: "acme"}), errdefs.ErrConflict, "acme")
	wantCategory(t, s.CreateTenant(ctx, &store.Tenant{}), errdefs.ErrInvalid)
	got, err := s.GetTenant(ctx, "acme")
	must(t, err)
	if want := (&store.Tenant{Name: "acme", CreatedAt: stored(at(0))}); !reflect.DeepEqual(got, want) {
		t.Errorf("GetTenant = %+v, want %+v", got, want)
	}
	_, err = s.GetTenant(ctx, "nope")
	wantCategory(t, err, errdefs.ErrNotFound, "nope")
	list, err := s.ListTenants(ctx)
	must(t, err)
	if len(list) != 2 || list[0].Name != "acme" || list[1].Name != "zeta" {
		t.Errorf("ListTenants = %+v, want acme, zeta", list)
	}

	must(t, s.CreateAPIKey(ctx, &store.APIKey{ID: "ka", Tenant: "acme", Hash: []byte("ka"), CreatedAt: at(0)}))
	must(t, s.CreateAPIKey(ctx, &store.APIKey{ID: "kz", Tenant: "zeta", Hash: []byte("kz"), CreatedAt: at(0)}))
	sb := newSandbox("sb-acme", "acme", "", sandbox.StateRunning, at(0))
	must(t, s.CreateSandbox(ctx, sb))
	must(t, s.CreateLease(ctx, &store.Lease{ID: "la", SandboxID: sb.ID, Tenant: "acme", KeyID: "ka", Scopes: []string{"exec"}}))
	// A live sandbox blocks the delete, and nothing changes.
	wantCategory(t, s.DeleteTenant(ctx, "acme", at(time.Hour)), errdefs.ErrConflict, "sandbox")
	if k, _ := s.GetAPIKey(ctx, store.AnyOwner, "ka"); k == nil || !k.RevokedAt.IsZero() {
		t.Errorf("a refused tenant delete revoked its key: %+v", k)
	}
	sb.State = sandbox.StateDeleted
	must(t, s.UpdateSandbox(ctx, sb))
	v := &store.Volume{ID: "v-acme", Name: "data", Tenant: "acme", State: store.VolumeAvailable, CreatedAt: at(0)}
	must(t, s.CreateVolume(ctx, v))
	wantCategory(t, s.DeleteTenant(ctx, "acme", at(time.Hour)), errdefs.ErrConflict, "volume")
	v.State = store.VolumeDeleted
	must(t, s.UpdateVolume(ctx, v))
	// Its own template blocks the delete too (its pool would refill for
	// a tenant that is gone); removed, the tenant goes.
	must(t, s.PutTemplate(ctx, &store.Template{Tenant: "acme", Name: "own", Layers: []string{"sha256:aa"}, Source: "test", CreatedAt: at(0)}))
	wantCategory(t, s.DeleteTenant(ctx, "acme", at(time.Hour)), errdefs.ErrConflict, "template")
	must(t, s.DeleteTenantTemplate(ctx, "acme", "own"))
	must(t, s.DeleteTenant(ctx, "acme", at(time.Hour)))
	_, err = s.GetTenant(ctx, "acme")
	wantCategory(t, err, errdefs.ErrNotFound)
	wantCategory(t, s.DeleteTenant(ctx, "acme", at(time.Hour)), errdefs.ErrNotFound)
	if k, _ := s.GetAPIKey(ctx, store.AnyOwner, "ka"); k == nil || !k.RevokedAt.Equal(stored(at(time.Hour))) {
		t.Errorf("deleting the tenant left its key %+v", k)
	}
	if l, _ := s.GetLease(ctx, "la"); l == nil || l.RevokedAt.IsZero() {
		t.Errorf("deleting the tenant left its lease %+v", l)
	}
	if k, _ := s.GetAPIKey(ctx, store.AnyOwner, "kz"); k == nil || !k.RevokedAt.IsZero() {
		t.Errorf("deleting acme revoked zeta's key: %+v", k)
	}
}

// testLeases: create and get round-trip; revoking by sandbox revokes
// that sandbox's only (once); revoking the minting key revokes its
// leases with it.
func testLeases(t *testing.T, s store.Store) {
	ctx := t.Context()
	must(t, s.CreateAPIKey(ctx, &store.APIKey{ID: "k1", Tenant: "t", Hash: []byte("k1"), CreatedAt: at(0)}))
	l1 := &store.Lease{ID: "l1", SandboxID: "sb1", Tenant: "t", KeyID: "k1", Scopes: []string{"exec", "files"},
		CreatedAt: at(0), ExpiresAt: at(time.Hour)}
	l2 := &store.Lease{ID: "l2", SandboxID: "sb1", Tenant: "t", Scopes: []string{"ports"}, CreatedAt: at(0)}
	l3 := &store.Lease{ID: "l3", SandboxID: "sb2", Tenant: "t", KeyID: "k1", Scopes: []string{"exec"}, CreatedAt: at(0)}
	for _, l := range []*store.Lease{l1, l2, l3} {
		must(t, s.CreateLease(ctx, l))
	}
	wantCategory(t, s.CreateLease(ctx, &store.Lease{ID: "l1", SandboxID: "x"}), errdefs.ErrConflict)
	wantCategory(t, s.CreateLease(ctx, &store.Lease{ID: "l9"}), errdefs.ErrInvalid)
	got, err := s.GetLease(ctx, "l1")
	must(t, err)
	want := *l1
	want.CreatedAt, want.ExpiresAt = stored(want.CreatedAt), stored(want.ExpiresAt)
	if !reflect.DeepEqual(got, &want) {
		t.Errorf("GetLease = %+v, want %+v", got, &want)
	}
	_, err = s.GetLease(ctx, "nope")
	wantCategory(t, err, errdefs.ErrNotFound)

	// A lease named in keep stays; the rest of the sandbox's go.
	l5 := &store.Lease{ID: "l5", SandboxID: "sb3", Tenant: "t", Scopes: []string{"exec"}, CreatedAt: at(0)}
	l6 := &store.Lease{ID: "l6", SandboxID: "sb3", Tenant: "t", Scopes: []string{"exec"}, CreatedAt: at(0)}
	must(t, s.CreateLease(ctx, l5))
	must(t, s.CreateLease(ctx, l6))
	if n, err := s.RevokeLeases(ctx, "sb3", at(time.Minute), "l5"); err != nil || n != 1 {
		t.Errorf("RevokeLeases(sb3, keep l5) = %d %v, want 1", n, err)
	}
	if l, _ := s.GetLease(ctx, "l5"); !l.RevokedAt.IsZero() {
		t.Errorf("the kept lease was revoked: %+v", l)
	}
	if l, _ := s.GetLease(ctx, "l6"); l.RevokedAt.IsZero() {
		t.Errorf("a lease not kept stayed: %+v", l)
	}
	if n, _ := s.RevokeLeases(ctx, "sb3", at(2*time.Minute)); n != 1 {
		t.Errorf("RevokeLeases(sb3) after keeping l5 = %d, want 1", n)
	}

	n, err := s.RevokeLeases(ctx, "sb1", at(time.Minute))
	must(t, err)
	if n != 2 {
		t.Errorf("RevokeLeases(sb1) = %d, want 2", n)
	}
	if n, _ := s.RevokeLeases(ctx, "sb1", at(2*time.Minute)); n != 0 {
		t.Errorf("RevokeLeases again = %d, want 0", n)
	}
	if l, _ := s.GetLease(ctx, "l1"); !l.RevokedAt.Equal(stored(at(time.Minute))) {
		t.Errorf("l1 revoked at %v, want %v", l.RevokedAt, at(time.Minute))
	}
	if l, _ := s.GetLease(ctx, "l3"); !l.RevokedAt.IsZero() {
		t.Errorf("revoking sb1's leases revoked sb2's: %+v", l)
	}
	// One lease revoked by itself: idempotent, first time kept, another
	// owner's not found.
	l4 := &store.Lease{ID: "l4", SandboxID: "sb2", Tenant: "t", Scopes: []string{"exec"}, CreatedAt: at(0)}
	must(t, s.CreateLease(ctx, l4))
	wantCategory(t, s.RevokeLease(ctx, store.OwnedBy("other"), "l4", at(time.Minute)), errdefs.ErrNotFound)
	wantCategory(t, s.RevokeLease(ctx, store.OwnedBy("t"), "nope", at(time.Minute)), errdefs.ErrNotFound)
	must(t, s.RevokeLease(ctx, store.OwnedBy("t"), "l4", at(time.Minute)))
	must(t, s.RevokeLease(ctx, store.AnyOwner, "l4", at(2*time.Minute)))
	if l, _ := s.GetLease(ctx, "l4"); !l.RevokedAt.Equal(stored(at(time.Minute))) {
		t.Errorf("l4 revoked at %v, want %v", l.RevokedAt, at(time.Minute))
	}
	if l, _ := s.GetLease(ctx, "l3"); !l.RevokedAt.IsZero() {
		t.Errorf("revoking l4 revoked l3: %+v", l)
	}
	must(t, s.RevokeAPIKey(ctx, "k1", at(time.Hour)))
	if l, _ := s.GetLease(ctx, "l3"); !l.RevokedAt.Equal(stored(at(time.Hour))) {
		t.Errorf("revoking k1 left its lease l3: %+v", l)
	}
}

// testPortTokens: a port token's record is created once, read back, seen
// only by its owner, listed per sandbox, revoked idempotently, and revoked
// with its minting key and with its tenant.
func testPortTokens(t *testing.T, s store.Store) {
	ctx := t.Context()
	must(t, s.CreateTenant(ctx, &store.Tenant{Name: "acme", CreatedAt: at(0)}))
	must(t, s.CreateAPIKey(ctx, &store.APIKey{ID: "kp", Tenant: "acme", Hash: []byte("kp"), CreatedAt: at(0)}))
	pt := &store.PortToken{ID: "p1", SandboxID: "sb1", Tenant: "acme", Port: 8080, KeyID: "kp", CreatedBy: "key:kp",
		CreatedAt: at(0), ExpiresAt: at(time.Hour)}
	must(t, s.CreatePortToken(ctx, pt))
	wantCategory(t, s.CreatePortToken(ctx, pt), errdefs.ErrConflict)
	wantCategory(t, s.CreatePortToken(ctx, &store.PortToken{ID: "p9", SandboxID: "sb1", Port: 0, ExpiresAt: at(time.Hour)}), errdefs.ErrInvalid)
	must(t, s.CreatePortToken(ctx, &store.PortToken{ID: "p2", SandboxID: "sb1", Tenant: "acme", Port: 9090,
		CreatedAt: at(time.Second), ExpiresAt: at(time.Hour)}))
	must(t, s.CreatePortToken(ctx, &store.PortToken{ID: "p3", SandboxID: "sb2", Tenant: "acme", Port: 80, KeyID: "kp",
		CreatedAt: at(0), ExpiresAt: at(time.Hour)}))
	got, err := s.GetPortToken(ctx, store.OwnedBy("acme"), "p1")
	must(t, err)
	if want := (&store.PortToken{ID: "p1", SandboxID: "sb1", Tenant: "acme", Port: 8080, KeyID: "kp", CreatedBy: "key:kp",
		CreatedAt: stored(at(0)), ExpiresAt: stored(at(time.Hour))}); !reflect.DeepEqual(got, want) {
		t.Errorf("GetPortToken = %+v, want %+v", got, want)
	}
	_, err = s.GetPortToken(ctx, store.OwnedBy("other"), "p1")
	wantCategory(t, err, errdefs.ErrNotFound)
	wantCategory(t, s.RevokePortToken(ctx, store.OwnedBy("other"), "p1", at(time.Minute)), errdefs.ErrNotFound)
	list, err := s.ListPortTokens(ctx, store.OwnedBy("acme"), "sb1")
	must(t, err)
	if len(list) != 2 || list[0].ID != "p1" || list[1].ID != "p2" {
		t.Errorf("ListPortTokens(sb1) = %+v, want p1, p2", list)
	}
	if list, _ := s.ListPortTokens(ctx, store.OwnedBy("other"), "sb1"); len(list) != 0 {
		t.Errorf("another owner lists %d port tokens", len(list))
	}
	must(t, s.RevokePortToken(ctx, store.OwnedBy("acme"), "p2", at(time.Minute)))
	must(t, s.RevokePortToken(ctx, store.AnyOwner, "p2", at(2*time.Minute)))
	if got, _ := s.GetPortToken(ctx, store.AnyOwner, "p2"); !got.RevokedAt.Equal(stored(at(time.Minute))) {
		t.Errorf("revoked twice: revoked_at %v, want the first", got.RevokedAt)
	}
	must(t, s.RevokeAPIKey(ctx, "kp", at(3*time.Minute)))
	for _, id := range []string{"p1", "p3"} {
		if got, _ := s.GetPortToken(ctx, store.AnyOwner, id); got.RevokedAt.IsZero() {
			t.Errorf("port token %s outlived its minting key", id)
		}
	}
	must(t, s.CreatePortToken(ctx, &store.PortToken{ID: "p4", SandboxID: "sb1", Tenant: "acme", Port: 1,
		CreatedAt: at(0), ExpiresAt: at(time.Hour)}))
	must(t, s.DeleteTenant(ctx, "acme", at(4*time.Minute)))
	if got, _ := s.GetPortToken(ctx, store.AnyOwner, "p4"); got.RevokedAt.IsZero() {
		t.Error("a port token outlived its tenant")
	}
}
