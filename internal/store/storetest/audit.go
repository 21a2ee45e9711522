package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/store"
)

var auditKey = []byte("storetest-audit-key-0123456789abcdef")

func auditSeal(r *store.AuditRecord) string { return audit.Seal(auditKey, r) }

func appendAudit(t *testing.T, s store.Store, r *store.AuditRecord) *store.AuditRecord {
	t.Helper()
	if err := s.AppendAudit(context.Background(), r, auditSeal); err != nil {
		t.Fatalf("AppendAudit: %v", err)
	}
	return r
}

// testAudit: chains per tenant numbered from 1 and linked, outcomes joined
// to their begins in lists, filters, paging, owner isolation, and a verify
// of the whole store that passes.
func testAudit(t *testing.T, s store.Store) {
	ctx := context.Background()
	b1 := appendAudit(t, s, &store.AuditRecord{Tenant: "", Kind: store.AuditBegin, Time: at(0), Actor: "local",
		Action: "POST /v1/sandboxes", RequestID: "r1", Source: "@"})
	if b1.Seq != 1 || b1.PrevHash != "" || b1.Hash == "" || b1.Time != stored(at(0)) {
		t.Fatalf("first record: seq %d prev %q hash %q time %v", b1.Seq, b1.PrevHash, b1.Hash, b1.Time)
	}
	b2 := appendAudit(t, s, &store.AuditRecord{Tenant: "", Kind: store.AuditBegin, Time: at(time.Second), Actor: "key:k1",
		Action: "DELETE /v1/sandboxes/{id}", Target: "sb1"})
	if b2.Seq != 2 || b2.PrevHash != b1.Hash {
		t.Fatalf("second record: seq %d prev %q, want 2 %q", b2.Seq, b2.PrevHash, b1.Hash)
	}
	o1 := appendAudit(t, s, &store.AuditRecord{Tenant: "", Kind: store.AuditOutcome, Ref: 1, Time: at(2 * time.Second), Result: "ok 201"})
	if o1.Seq != 3 || o1.PrevHash != b2.Hash {
		t.Fatalf("outcome: seq %d prev %q", o1.Seq, o1.PrevHash)
	}
	other := appendAudit(t, s, &store.AuditRecord{Tenant: "acme", Kind: store.AuditBegin, Time: at(3 * time.Second), Actor: "key:k2",
		Action: "POST /v1/volumes"})
	if other.Seq != 1 || other.PrevHash != "" {
		t.Fatalf("another tenant's chain starts at seq %d prev %q", other.Seq, other.PrevHash)
	}
	// An outcome must name an earlier record of its chain.
	if err := s.AppendAudit(ctx, &store.AuditRecord{Tenant: "acme", Kind: store.AuditOutcome, Ref: 9, Time: at(0)}, auditSeal); err == nil {
		t.Fatal("an outcome of a record that does not exist was appended")
	}
	if err := s.AppendAudit(ctx, &store.AuditRecord{Tenant: "acme", Kind: "edit", Time: at(0)}, auditSeal); err == nil {
		t.Fatal("a record of an unknown kind was appended")
	}

	all, next, err := s.ListAudit(ctx, store.AuditFilter{Owner: store.AnyOwner}, store.Page{})
	if err != nil || next != "" || len(all) != 3 {
		t.Fatalf("ListAudit(any) = %d entries, %q, %v; want the 3 begins", len(all), next, err)
	}
	if all[0].Seq != 1 || all[0].Result != "ok 201" || all[0].CompletedAt != stored(at(2*time.Second)) || all[0].RequestID != "r1" {
		t.Errorf("completed entry: %+v", all[0])
	}
	if all[1].Result != store.AuditPending || !all[1].CompletedAt.IsZero() {
		t.Errorf("entry without an outcome: %+v, want result %q", all[1], store.AuditPending)
	}
	for _, tc := range []struct {
		name string
		f    store.AuditFilter
		want int
	}{
		{"own tenant", store.AuditFilter{Owner: store.OwnedBy("")}, 2},
		{"other tenant", store.AuditFilter{Owner: store.OwnedBy("acme")}, 1},
		{"unknown tenant", store.AuditFilter{Owner: store.OwnedBy("nobody")}, 0},
		{"actor", store.AuditFilter{Owner: store.AnyOwner, Actor: "key:k1"}, 1},
		{"action", store.AuditFilter{Owner: store.AnyOwner, Action: "POST /v1/volumes"}, 1},
		{"target", store.AuditFilter{Owner: store.AnyOwner, Target: "sb1"}, 1},
		{"since", store.AuditFilter{Owner: store.AnyOwner, Since: at(time.Second)}, 2},
		{"until", store.AuditFilter{Owner: store.AnyOwner, Until: at(time.Second)}, 1},
	} {
		got, _, err := s.ListAudit(ctx, tc.f, store.Page{})
		if err != nil || len(got) != tc.want {
			t.Errorf("%s: %d entries, %v; want %d", tc.name, len(got), err, tc.want)
		}
	}
	// Paging: one at a time, each once, in order.
	var seen []int64
	p := store.Page{Limit: 1}
	for {
		page, next, err := s.ListAudit(ctx, store.AuditFilter{Owner: store.AnyOwner}, p)
		if err != nil {
			t.Fatalf("page: %v", err)
		}
		for _, e := range page {
			seen = append(seen, e.ID)
		}
		if next == "" {
			break
		}
		p.Cursor = next
	}
	if len(seen) != 3 || seen[0] >= seen[1] || seen[1] >= seen[2] {
		t.Errorf("paged ids %v, want 3 increasing", seen)
	}
	if _, _, err := s.ListAudit(ctx, store.AuditFilter{Owner: store.AnyOwner}, store.Page{Limit: 1, Cursor: "bogus"}); err == nil {
		t.Error("a bogus cursor was accepted")
	}

	// Scan: by tenant then seq, owner-filtered.
	var order []string
	if err := s.ScanAudit(ctx, store.AnyOwner, func(r *store.AuditRecord) error {
		order = append(order, fmt.Sprintf("%s/%d/%s", r.Tenant, r.Seq, r.Kind))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := "[/1/begin /2/begin /3/outcome acme/1/begin]"; fmt.Sprint(order) != want {
		t.Errorf("scan order %v, want %s", order, want)
	}
	n := 0
	if err := s.ScanAudit(ctx, store.OwnedBy("acme"), func(r *store.AuditRecord) error {
		if r.Tenant != "acme" {
			t.Errorf("tenant acme's scan saw %q's record", r.Tenant)
		}
		n++
		return nil
	}); err != nil || n != 1 {
		t.Errorf("acme's scan: %d records, %v", n, err)
	}
	heads, err := s.AuditHeads(ctx, store.AnyOwner)
	if err != nil || heads[""].Seq != 3 || heads[""].Hash != o1.Hash || heads["acme"].Seq != 1 || len(heads) != 2 {
		t.Errorf("AuditHeads = %v, %v", heads, err)
	}
	if h, err := s.AuditHeads(ctx, store.OwnedBy("acme")); err != nil || len(h) != 1 {
		t.Errorf("acme's heads = %v, %v", h, err)
	}
	rep, err := audit.New(s, auditKey, nil).Verify(ctx, store.AnyOwner)
	if err != nil || !rep.OK || rep.Checked != 4 || rep.Pending != 2 {
		t.Errorf("Verify = %+v, %v; want ok, 4 checked, 2 pending", rep, err)
	}
	if rep, err := audit.New(s, []byte("another key, another daemon......"), nil).Verify(ctx, store.AnyOwner); err != nil || rep.OK || rep.Bad == nil || rep.Bad.Seq != 1 {
		t.Errorf("Verify under another key = %+v, %v; want the first record bad", rep, err)
	}
}

// testAuditConcurrent: appenders racing on one tenant (two handles on one
// database for PostgreSQL's shared suite) leave one gapless, linked chain.
func testAuditConcurrent(t *testing.T, s store.Store) { auditRace(t, s, s) }

func auditRace(t *testing.T, a, b store.Store) {
	ctx := context.Background()
	const workers, each = 4, 15
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		st := a
		if w%2 == 1 {
			st = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r := &store.AuditRecord{Tenant: "race", Kind: store.AuditBegin, Time: at(time.Duration(i) * time.Millisecond),
					Actor: fmt.Sprintf("w%d", w), Action: "x"}
				if err := st.AppendAudit(ctx, r, auditSeal); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent AppendAudit: %v", err)
	}
	rep, err := audit.New(a, auditKey, nil).Verify(ctx, store.OwnedBy("race"))
	if err != nil || !rep.OK || rep.Checked != workers*each {
		t.Fatalf("Verify after concurrent appends = %+v, %v; want ok with %d records", rep, err, workers*each)
	}
}
