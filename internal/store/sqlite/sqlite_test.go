package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/migrations"
	"github.com/berth-sh/berth/internal/store/sqlstore"
	"github.com/berth-sh/berth/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := Open(t.Context(), filepath.Join(t.TempDir(), "berth.db"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// rawDB opens the file without the store, to inspect or tamper with it.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?"+writeDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

type migrationRow struct {
	Version   int
	Name      string
	AppliedAt int64
}

func migrationRows(t *testing.T, path string) []migrationRow {
	t.Helper()
	rows, err := rawDB(t, path).QueryContext(t.Context(), `SELECT version, name, applied_at FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []migrationRow
	for rows.Next() {
		var r migrationRow
		if err := rows.Scan(&r.Version, &r.Name, &r.AppliedAt); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestReopenKeepsDataAndMigratesOnce(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "berth.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	sb := &sandbox.Sandbox{ID: "keep", Tenant: "t", Name: "keep", State: sandbox.StateRunning, CreatedAt: time.Now()}
	if err := s.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvent(ctx, &sandbox.Event{SandboxID: "keep", Type: "state", Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"other", "keep"} {
		if _, err := s.AllocateIDSlot(ctx, id, "n", 10); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before := migrationRows(t, path)
	if len(before) != migrations.Latest() {
		t.Fatalf("schema_migrations has %d rows, want %d", len(before), migrations.Latest())
	}

	s, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.GetSandbox(ctx, store.AnyOwner, "keep")
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "keep" || got.Generation != 1 {
		t.Errorf("reopened record = %+v", got)
	}
	evs, _, err := s.ListEvents(ctx, store.AnyOwner, "keep", 0, store.Page{})
	if err != nil || len(evs) != 1 {
		t.Errorf("reopened events = %v, %v", evs, err)
	}
	// A restarted daemon finds every sandbox's host id range where it was.
	if slot, err := s.AllocateIDSlot(ctx, "keep", "n", 10); err != nil || slot != 1 {
		t.Errorf("reopened id slot of keep = %d, %v; want 1", slot, err)
	}
	if slot, err := s.AllocateIDSlot(ctx, "new", "n", 10); err != nil || slot != 2 {
		t.Errorf("new id slot after reopen = %d, %v; want 2", slot, err)
	}
	after := migrationRows(t, path)
	if len(after) != len(before) {
		t.Fatalf("reopen changed schema_migrations: %v -> %v", before, after)
	}
	for i := range before {
		if before[i] != after[i] {
			t.Errorf("reopen changed schema_migrations: %v -> %v", before, after)
		}
	}
	applied, err := sqlstore.Migrate(ctx, rawDB(t, path), dialect)
	if err != nil || len(applied) != 0 {
		t.Errorf("Migrate on a current database applied %v, err %v", applied, err)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "berth.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	future := migrations.Latest() + 1
	if _, err := rawDB(t, path).ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'from_the_future', 0)`, future); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, path)
	if !errors.Is(err, sqlstore.ErrSchemaTooNew) {
		t.Fatalf("Open of a newer schema: err = %v, want ErrSchemaTooNew", err)
	}
	if !strings.Contains(err.Error(), "newer") || !strings.Contains(err.Error(), path) {
		t.Errorf("error %q should say the schema is newer and name the file", err)
	}
}

func TestRefusesForeignMigrationHistory(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "berth.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := rawDB(t, path).ExecContext(ctx, `UPDATE schema_migrations SET name = 'other' WHERE version = 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, path); err == nil || !strings.Contains(err.Error(), "incompatible") {
		t.Fatalf("Open with a different migration history: err = %v", err)
	}
}

func TestFileMode(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		prepare func(path string) error
	}{
		{"new", func(string) error { return nil }},
		{"existing world-readable", func(p string) error { return os.WriteFile(p, nil, 0o644) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".db")
			if err := tc.prepare(path); err != nil {
				t.Fatal(err)
			}
			s, err := Open(t.Context(), path)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, p := range []string{path, path + "-wal", path + "-shm"} {
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if m := fi.Mode().Perm(); m != 0o600 {
					t.Errorf("%s: mode %o, want 600", filepath.Base(p), m)
				}
			}
		})
	}
}

func TestPragmas(t *testing.T) {
	path := filepath.Join(t.TempDir(), "berth.db")
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := rawDB(t, path)
	var mode string
	if err := db.QueryRowContext(t.Context(), `PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode = %q, want wal", mode)
	}
}

func TestBadPath(t *testing.T) {
	for _, p := range []string{"", ":memory:", "file:x.db", "x.db?mode=ro", filepath.Join(t.TempDir(), "missing", "x.db")} {
		if s, err := Open(t.Context(), p); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", p)
		}
	}
}

// TestTwoHandles has two stores on one file, as two processes would, write
// at once: the busy timeout serializes them without errors.
func TestTwoHandles(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "berth.db")
	var ss [2]store.Store
	for i := range ss {
		s, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ss[i] = s
	}
	errc := make(chan error, 2)
	for i, s := range ss {
		go func() {
			for j := range 50 {
				id := fmt.Sprintf("h%d-%02d", i, j)
				sb := &sandbox.Sandbox{ID: id, Tenant: "t", State: sandbox.StateCreating}
				if err := s.CreateSandbox(ctx, sb); err != nil {
					errc <- err
					return
				}
				sb.State = sandbox.StateRunning
				if err := s.UpdateSandbox(ctx, sb); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for range ss {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
	list, _, err := ss[0].ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner}, store.Page{})
	if err != nil || len(list) != 100 {
		t.Errorf("got %d sandboxes (err %v), want 100", len(list), err)
	}
}
