package storetest_test

import (
	"path/filepath"
	"testing"

	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/sqlite"
	"github.com/berth-sh/berth/internal/store/storetest"
)

// TestSharedSQLite runs the two-handle cases on SQLite: two Opens of one file,
// as two berth processes on one host would have. (PostgreSQL runs them in
// its own package.)
func TestSharedSQLite(t *testing.T) {
	storetest.RunShared(t, func(t *testing.T) (store.Store, store.Store) {
		path := filepath.Join(t.TempDir(), "berth.db")
		a, err := sqlite.Open(t.Context(), path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := sqlite.Open(t.Context(), path)
		if err != nil {
			a.Close()
			t.Fatal(err)
		}
		return a, b
	})
}
