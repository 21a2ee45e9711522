package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/store/sqlstore"
)

// auditEntries is `berth audit ls -o json` with extra flags.
func auditEntries(t *testing.T, d *daemon, args ...string) []api.AuditEntry {
	t.Helper()
	out, errOut, code := d.cli(append([]string{"audit", "ls", "-o", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("berth audit ls: exit %d: %s", code, errOut)
	}
	var es []api.AuditEntry
	jsonDecode(t, out, &es)
	return es
}

// auditVerify runs `berth audit verify` and returns its exit code and output.
func auditVerify(t *testing.T, d *daemon) (int, string) {
	t.Helper()
	out, errOut, code := d.cli("audit", "verify")
	return code, out + errOut
}

// db is the test's own connection to the daemon's database, with the
// store's ? placeholders rewritten for PostgreSQL.
type db struct {
	*sql.DB
	pg bool
}

func (b db) rebind(q string) string {
	if b.pg {
		return sqlstore.DollarPlaceholders(q)
	}
	return q
}

func (b db) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := b.Exec(b.rebind(q), args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// checkTamperDetected edits, deletes and reorders records of the default
// tenant's chain directly in the database under the running daemon, and
// checks that `berth audit verify` passes before, fails naming the record
// after each change, and passes again once it is undone.
func checkTamperDetected(t *testing.T, d *daemon, b db) {
	t.Helper()
	if code, out := auditVerify(t, d); code != 0 || !strings.Contains(out, "audit log intact") {
		t.Fatalf("verify of an untouched log: exit %d: %s", code, out)
	}
	bad := func(what, want string) {
		t.Helper()
		code, out := auditVerify(t, d)
		if code == 0 || !strings.Contains(out, want) {
			t.Errorf("verify after %s: exit %d: %q; want a failure naming %q", what, code, out, want)
		}
	}
	// Edited: the target of record 2.
	var target string
	q := "SELECT target FROM audit_log WHERE tenant = '' AND seq = 2"
	if err := b.QueryRow(q).Scan(&target); err != nil {
		t.Fatal(err)
	}
	b.exec(t, "UPDATE audit_log SET target = ? WHERE tenant = '' AND seq = 2", "forged-"+target)
	bad("an edit of record 2", "record 2: its hash does not match")
	b.exec(t, "UPDATE audit_log SET target = ? WHERE tenant = '' AND seq = 2", target)

	// Deleted: record 3, then put back as it was.
	removeAndRestore(t, d, b, 3, bad)

	// Reordered: records 2 and 3 swap places.
	swap := func() {
		b.exec(t, "UPDATE audit_log SET seq = -1 WHERE tenant = '' AND seq = 2")
		b.exec(t, "UPDATE audit_log SET seq = 2 WHERE tenant = '' AND seq = 3")
		b.exec(t, "UPDATE audit_log SET seq = 3 WHERE tenant = '' AND seq = -1")
	}
	swap()
	bad("swapping records 2 and 3", "record 2: its prev_hash is not the hash of record 1")
	swap()

	// Truncated: the chain's last record removed (the verify call itself
	// appends after it, so it shows as missing either way).
	var last int64
	if err := b.QueryRow("SELECT MAX(seq) FROM audit_log WHERE tenant = ''").Scan(&last); err != nil {
		t.Fatal(err)
	}
	removeAndRestore(t, d, b, last, bad)
}

// removeAndRestore deletes the default tenant's record seq, expects verify
// to name it missing, and puts it back as it was.
func removeAndRestore(t *testing.T, d *daemon, b db, seq int64, bad func(what, want string)) {
	t.Helper()
	var r struct {
		kind, actor, action, target, reqID, source, result, prev, hash string
		ref, at                                                        int64
	}
	if err := b.QueryRow(b.rebind(`SELECT kind, ref, at, actor, action, target, request_id, source, result, prev_hash, hash
		FROM audit_log WHERE tenant = '' AND seq = ?`), seq).Scan(&r.kind, &r.ref, &r.at, &r.actor, &r.action, &r.target,
		&r.reqID, &r.source, &r.result, &r.prev, &r.hash); err != nil {
		t.Fatal(err)
	}
	b.exec(t, "DELETE FROM audit_log WHERE tenant = '' AND seq = ?", seq)
	bad(fmt.Sprintf("the removal of record %d", seq), fmt.Sprintf("record %d is missing", seq))
	b.exec(t, `INSERT INTO audit_log (tenant, seq, kind, ref, at, actor, action, target, request_id, source, result, prev_hash, hash)
		VALUES ('', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, seq, r.kind, r.ref, r.at, r.actor, r.action, r.target, r.reqID, r.source,
		r.result, r.prev, r.hash)
	if code, out := auditVerify(t, d); code != 0 {
		t.Fatalf("verify once record %d is back: exit %d: %s", seq, code, out)
	}
}

// TestAuditTamperSQLite: API calls (one failing) and a policy's idle stop
// are audited with their actors and outcomes in the embedded database, and
// an edit, removal or reordering of a record in the SQLite file is found by
// `berth audit verify`, naming the record.
func TestAuditTamperSQLite(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "audited", Persistent: true,
		Policy: api.Policy{IdleTimeoutSeconds: 1, OnIdle: "stop"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.DeleteSandbox(ctx, "no-such-sandbox", true); err == nil {
		t.Fatal("deleting a sandbox that does not exist succeeded")
	}
	// The idle policy stops it: a system action with its own actor.
	deadline := time.Now().Add(60 * time.Second)
	var stops []api.AuditEntry
	for time.Now().Before(deadline) {
		stops = auditEntries(t, d, "--actor", "system:policy", "--target", sb.ID)
		if len(stops) == 1 && stops[0].Result != "pending" {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(stops) != 1 || stops[0].Action != "policy.stop" || stops[0].Result != "ok" {
		t.Fatalf("policy stop entries %+v; want one policy.stop by system:policy, ok", stops)
	}
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	es := auditEntries(t, d)
	want := []struct{ action, target, result string }{
		{"POST /v1/sandboxes", "", "ok 201"},
		{"DELETE /v1/sandboxes/{id}", "no-such-sandbox", "error 404"},
		{"policy.stop", sb.ID, "ok"},
		{"DELETE /v1/sandboxes/{id}", sb.ID, "ok 200"},
	}
	if len(es) < len(want) {
		t.Fatalf("audit entries %+v; want at least %d", es, len(want))
	}
	for i, w := range want {
		e := es[i]
		wantActor := "local"
		if w.action == "policy.stop" {
			wantActor = "system:policy"
		}
		if e.Action != w.action || e.Target != w.target || e.Result != w.result || e.Actor != wantActor || e.Seq == 0 {
			t.Errorf("entry %d = %+v; want %s on %q by %s: %s", i, e, w.action, w.target, wantActor, w.result)
		}
		if w.action != "policy.stop" && e.RequestID == "" {
			t.Errorf("entry %d has no request id", i)
		}
	}
	// Filters: by action and by time.
	if got := auditEntries(t, d, "--action", "DELETE /v1/sandboxes/{id}"); len(got) != 2 {
		t.Errorf("--action DELETE: %d entries, want 2", len(got))
	}
	if got := auditEntries(t, d, "--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)); len(got) != 0 {
		t.Errorf("--since an hour ahead: %d entries, want 0", len(got))
	}
	// Export: JSON lines of begins and outcomes, chained.
	out, errOut, code := d.cli("audit", "export")
	if code != 0 {
		t.Fatalf("audit export: %d %s", code, errOut)
	}
	var prev string
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i, l := range lines {
		var r api.AuditRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("export line %d %q: %v", i, l, err)
		}
		if r.Seq != int64(i+1) || r.PrevHash != prev || len(r.Hash) != 64 {
			t.Fatalf("export line %d: seq %d prev %q hash %q", i, r.Seq, r.PrevHash, r.Hash)
		}
		prev = r.Hash
	}
	if len(lines) < 2*len(want) {
		t.Errorf("export has %d records, want at least %d", len(lines), 2*len(want))
	}

	sqldb, err := sql.Open("sqlite", filepath.Join(d.dataDir, "berth.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close()
	checkTamperDetected(t, d, db{DB: sqldb})
}

// TestAuditTamperPostgres is the same tamper detection on PostgreSQL.
func TestAuditTamperPostgres(t *testing.T) {
	parallel(t)
	url := pgURL(t)
	d := startDaemonWith(t, "--store", url)
	ctx := context.Background()
	for _, id := range []string{"missing-1", "missing-2", "missing-3"} {
		if _, err := d.c.DeleteSandbox(ctx, id, true); err == nil {
			t.Fatalf("deleting %s succeeded", id)
		}
	}
	if es := auditEntries(t, d, "--action", "DELETE /v1/sandboxes/{id}"); len(es) != 3 || es[0].Result != "error 404" {
		t.Fatalf("entries %+v; want 3 failed deletes", es)
	}
	sqldb, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close()
	checkTamperDetected(t, d, db{DB: sqldb, pg: true})
}

// TestAuditPendingSurvivesCrash: a daemon SIGKILLed in the middle of a
// create leaves the create's begin record, which after the restart lists
// as pending and which verify accepts.
func TestAuditPendingSurvivesCrash(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	d.stop()
	d.startWithEnv("BERTH_FAILPOINTS=create.after-mount")
	if _, err := d.c.CreateSandbox(context.Background(), api.CreateSandboxRequest{Name: "crashed"}); err == nil {
		t.Fatal("create succeeded although the daemon should have died")
	}
	d.waitExit()
	d.startWithEnv()
	es := auditEntries(t, d, "--action", "POST /v1/sandboxes")
	if len(es) != 1 || es[0].Result != "pending" || es[0].Actor != "local" || !es[0].CompletedAt.IsZero() {
		t.Fatalf("entries after the crash %+v; want one pending create", es)
	}
	v, err := d.c.VerifyAudit(context.Background())
	// Pending: the crashed create, and this verify call itself (its
	// outcome follows its answer).
	if err != nil || !v.OK || v.Pending != 2 {
		t.Fatalf("verify after the crash = %+v, %v; want ok with 2 pending", v, err)
	}
	if code, out := auditVerify(t, d); code != 0 {
		t.Fatalf("berth audit verify after the crash: exit %d: %s", code, out)
	}
}

// TestAuditAnchorTruncation (#30): the daemon signs its chains' heads
// into its anchor file beside the data dir, every --audit-anchor-interval;
// deleting the host chain's last records and rewinding its head row in
// the SQLite file under the running daemon passes `berth audit verify`
// (the database alone cannot tell, as documented) and fails `berth audit
// verify --anchor FILE` with an anchor written before the cut.
func TestAuditAnchorTruncation(t *testing.T) {
	parallel(t)
	d := newDaemon(t, &daemon{extra: []string{"--audit-anchor-interval", "200ms"}})
	for _, n := range []string{"anchor-a", "anchor-b", "anchor-c", "anchor-d"} {
		if _, errOut, code := d.cli("tenant", "create", n); code != 0 {
			t.Fatalf("tenant create %s: %s", n, errOut)
		}
	}
	sqldb, err := sql.Open("sqlite", filepath.Join(d.dataDir, "berth.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close()
	var head int64
	if err := sqldb.QueryRow("SELECT seq FROM audit_heads WHERE tenant = ''").Scan(&head); err != nil {
		t.Fatal(err)
	}
	// The anchor the daemon writes once it has seen the head: kept aside,
	// as an operator's copy off the machine would be.
	path := audit.DefaultAnchorPath(d.dataDir)
	var raw []byte
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		raw, err = os.ReadFile(path)
		if err == nil {
			var a audit.Anchor
			if json.Unmarshal(raw, &a) == nil && a.Heads[""].Seq >= head {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no anchor of the host chain's head %d at %s: %v %s", head, path, err, raw)
		}
	}
	kept := filepath.Join(t.TempDir(), "anchor.json")
	if err := os.WriteFile(kept, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := auditVerify(t, d); code != 0 {
		t.Fatalf("verify of an untouched log: exit %d: %s", code, out)
	}
	if out, errOut, code := d.cli("audit", "verify", "--anchor", kept); code != 0 {
		t.Fatalf("verify against the anchor of an untouched log: exit %d: %s%s", code, out, errOut)
	}
	// The attack: the chain cut below the anchored head (the last tenant
	// creates' records and the verifies' since), its head rewound to the
	// record left last.
	cut := head - 2
	db{DB: sqldb}.exec(t, "DELETE FROM audit_log WHERE tenant = '' AND seq > ?", cut)
	db{DB: sqldb}.exec(t, "UPDATE audit_heads SET seq = ?, hash = (SELECT hash FROM audit_log WHERE tenant = '' AND seq = ?) WHERE tenant = ''", cut, cut)
	if code, out := auditVerify(t, d); code != 0 {
		t.Fatalf("without the anchor the cut is not seen (as documented), but verify said: exit %d: %s", code, out)
	}
	// The verify just made appended to the cut chain, so the anchored
	// head's seq may hold a record again: not the anchored one.
	out, errOut, code := d.cli("audit", "verify", "--anchor", kept)
	if msg := out + errOut; code == 0 || !strings.Contains(msg, "tampered") || !strings.Contains(msg, "anchor") {
		t.Fatalf("verify against the anchor of a cut chain: exit %d: %s; want a failure naming the anchored head", code, msg)
	}
	t.Logf("verify --anchor: %s", strings.TrimSpace(out+errOut))
}
