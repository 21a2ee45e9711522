package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

// testQuotas: put-get round trip, replace, per tenant, delete, negative
// refused, none is not found.
func testQuotas(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.GetTenantQuota(ctx, "acme"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("no row: %v", err)
	}
	at := time.Now().UTC().Truncate(time.Microsecond)
	q := &store.TenantQuota{Tenant: "acme", MaxSandboxes: 3, MaxCPUMillis: 4000, MaxMemory: 8 << 30, MaxStorage: 100 << 30,
		CreateRate: 60, CreateBurst: 5, KeyRate: 10, KeyBurst: 20, UpdatedAt: at}
	if err := s.PutTenantQuota(ctx, q); err != nil {
		t.Fatal(err)
	}
	if err := s.PutTenantQuota(ctx, &store.TenantQuota{Tenant: "other", MaxSandboxes: 1, UpdatedAt: at}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetTenantQuota(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if *got != *q {
		t.Fatalf("got %+v, want %+v", got, q)
	}
	q2 := *q
	q2.MaxSandboxes, q2.CreateRate = 7, 0
	if err := s.PutTenantQuota(ctx, &q2); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetTenantQuota(ctx, "acme"); got.MaxSandboxes != 7 || got.CreateRate != 0 || got.MaxCPUMillis != 4000 {
		t.Fatalf("replaced: %+v", got)
	}
	if got, _ := s.GetTenantQuota(ctx, "other"); got == nil || got.MaxSandboxes != 1 {
		t.Fatalf("other tenant: %+v", got)
	}
	if err := s.PutTenantQuota(ctx, &store.TenantQuota{Tenant: "neg", MaxMemory: -1}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("negative: %v", err)
	}
	if err := s.DeleteTenantQuota(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetTenantQuota(ctx, "acme"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	if err := s.DeleteTenantQuota(ctx, "acme"); err != nil {
		t.Fatalf("deleting nothing: %v", err)
	}
}
