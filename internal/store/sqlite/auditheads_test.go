package sqlite

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/store"
)

// TestAuditHeadRemembered: on SQLite an append seals its record after the
// chain head the store remembers and moves the head by compare-and-swap
// (sqlstore/audit.go). The chain stays gapless and linked under
// concurrent appends and refused outcomes (which write nothing), and a
// head that is not the remembered one — rewound by hand, as a rolled-back
// batch leaves it — is read again: the next record follows the head in
// the database, not the memory.
func TestAuditHeadRemembered(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "berth.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	seal := func(r *store.AuditRecord) string {
		return fmt.Sprintf("%s/%d/%s/%d/%s", r.Tenant, r.Seq, r.Kind, r.Ref, r.PrevHash)
	}
	now := time.Now()
	appendOne := func(tenant, kind string, ref int64) (*store.AuditRecord, error) {
		r := &store.AuditRecord{Tenant: tenant, Kind: kind, Ref: ref, Time: now, Action: "test"}
		return r, s.AppendAudit(ctx, r, seal)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for i := range 100 {
		tenant := []string{"", "acme"}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := appendOne(tenant, store.AuditBegin, 0)
			if err != nil {
				errs <- err
				return
			}
			if _, err := appendOne(tenant, store.AuditOutcome, b.Seq+1000); err == nil {
				errs <- fmt.Errorf("an outcome of a record not yet written was appended")
			}
			if _, err := appendOne(tenant, store.AuditOutcome, b.Seq); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	check := func(tenant string, want int64) {
		t.Helper()
		var seq int64
		prev := ""
		err := s.ScanAudit(ctx, store.AnyOwner, func(r *store.AuditRecord) error {
			if r.Tenant != tenant {
				return nil
			}
			seq++
			if r.Seq != seq || r.PrevHash != prev || r.Hash != seal(r) {
				return fmt.Errorf("record %+v: want seq %d after hash %q", r, seq, prev)
			}
			prev = r.Hash
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if seq != want {
			t.Fatalf("tenant %q: %d records, want %d", tenant, seq, want)
		}
	}
	check("acme", 100)
	check("", 100)

	// The head rewound behind the store's back (the chain cut to 10).
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`DELETE FROM audit_log WHERE tenant = 'acme' AND seq > 10`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE audit_heads SET seq = 10, hash = (SELECT hash FROM audit_log WHERE tenant = 'acme' AND seq = 10) WHERE tenant = 'acme'`); err != nil {
		t.Fatal(err)
	}
	r, err := appendOne("acme", store.AuditBegin, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Seq != 11 {
		t.Fatalf("the record after a rewound head got seq %d, want 11", r.Seq)
	}
	check("acme", 11)
	check("", 100)
}
