package sqlite

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/migrations"
)

// TestUpgradeTenantTemplates: a database at schema 11 with templates, a
// build-cache entry and a pool keeps them through migration 0012, as the
// shared catalogue's (tenant ""), and the rebuilt tables take per-tenant
// names.
func TestUpgradeTenantTemplates(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "berth.db")
	db := rawDB(t, path)
	ms, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE schema_migrations (version BIGINT NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[:11] {
		if _, err := db.ExecContext(ctx, strings.ReplaceAll(m.SQL, "{{identity}}", dialect.Identity)); err != nil {
			t.Fatalf("apply %d: %v", m.Version, err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO schema_migrations VALUES (?, ?, 0)`, m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{
		`INSERT INTO templates (name, layers, config, builtin, source, size, created_at) VALUES ('py', '["sha256:l1"]', '{}', TRUE, 'builtin:x', 7, 1)`,
		`INSERT INTO build_cache (key, layer, created_at) VALUES ('k', 'sha256:l2', 1)`,
		`INSERT INTO pools (template, min_ready, updated_at) VALUES ('py', 2, 1)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tpl, err := s.GetTemplate(ctx, "py")
	if err != nil || tpl.Tenant != "" || !tpl.Builtin || tpl.Size != 7 || !slices.Equal(tpl.Layers, []string{"sha256:l1"}) {
		t.Fatalf("py after upgrade = %+v, %v", tpl, err)
	}
	if l, err := s.GetBuildCache(ctx, "", "k"); err != nil || l != "sha256:l2" {
		t.Fatalf("build cache after upgrade = %q, %v", l, err)
	}
	if p, err := s.ListPools(ctx); err != nil || len(p) != 1 || p[store.PoolKey{Template: "py"}] != 2 {
		t.Fatalf("pools after upgrade = %v, %v", p, err)
	}
	// The new key takes a tenant's own py beside the shared one.
	if _, err := s.GetTenantTemplate(ctx, "a", "py"); err == nil {
		t.Fatal("a has a py before putting one")
	}
	tpl.Tenant = "a"
	if err := s.PutTemplate(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	ts, _, err := s.ListTemplates(ctx, store.Page{})
	if err != nil || len(ts) != 1 || ts[0].Tenant != "" {
		t.Fatalf("shared catalogue after a's put = %+v, %v", ts, err)
	}
	if own, err := s.GetTenantTemplate(ctx, "a", "py"); err != nil || own.Tenant != "a" {
		t.Fatalf("a's py = %+v, %v", own, err)
	}
}
