// Package audit is berth's tamper-evident audit log over store.Audit:
// every mutating API call and every system action is begun (a record
// written before it takes effect) and completed (an outcome record naming
// the begin), in a hash chain per tenant sealed with HMAC-SHA256 under a
// key kept in the data dir (KeyFile, 0600) and never in the database.
//
// What Verify detects: a record edited (its seal no longer matches), removed
// (a gap in the tenant's sequence, or a chain shorter than its head row),
// reordered (a seq or prev_hash that does not follow), or forged by someone
// who holds the database but not the key (they cannot compute a seal). What
// it cannot detect: someone with the key and the database rewriting a whole
// chain, and the removal of a chain's last records together with a matching
// edit of its head row — which VerifyAnchor detects against an anchor, the
// signed heads the daemon writes outside the database (anchor.go).
//
// What is audited. The server's guard (internal/server/audit.go) begins a
// record after authorization for every route whose method is not GET, and
// for the WebSocket exec; if the begin cannot be written the call is
// refused with 503 before it runs (TestEveryMutatingRouteAudited walks the
// route table). Reads, the port proxy (a sandbox's own web traffic), the
// catch-all 404 and what the guard refuses before authorization are not
// audited. The engine audits its own actions through engine.Config.Audit
// (System): policy pause/stop/delete, the reconciler's cleanups and
// doctor --fix's removals, the watchdog's kill of an unresponsive agent's
// processes. A record says when, who (local, key:<id>, lease:<sandbox>,
// system:<component>), in which tenant, what (the route pattern, or
// <component>.<action>: policy.stop, reconciler.cleanup, reconciler.fix
// <kind>, watchdog.kill), on which target (the {id}/{name} path value), the
// request id, the caller's address and the result (pending until an
// outcome is recorded — for ever after a crash). Request bodies and
// queries are never recorded: they may carry secrets.
//
// Chains. Per tenant, records are numbered (seq), and each stores the
// previous record's hash and its own, an HMAC-SHA256 of Canonical (every
// field but the row id, length-prefixed). Rows are only inserted: an
// outcome is its own record whose ref is its begin's seq. The chain's head
// row (audit_heads) is incremented first in the appending transaction,
// which on PostgreSQL holds its row lock until commit, so appenders of one
// tenant — several daemons included — are serialised and a chain stays
// gapless. Daemons sharing one database must share the key (serve
// --audit-key-file, OpenKeyFile: the operator's file, never made by berth,
// regular, 0600, at least 32 bytes), or each verifies only its own records.
//
// The anchor (anchor.go): every serve --audit-anchor-interval (1 min) the
// daemon signs every chain's head with Ed25519 (key
// <data-dir>/audit-anchor.key, never in the database) and writes the anchor
// to serve --audit-anchor-file (default <data-dir>.audit-anchor.json,
// beside the data dir) and to a line of its log. berth audit verify
// --anchor FILE sends it with POST /v1/audit/verify; the daemon checks the
// signature with its own key, then that every chain still holds the
// anchored record and a head not below it. Keep anchors where whoever can
// write the database cannot.
//
// Reading (scope audit): GET /v1/audit (filters since, until, actor,
// action, target; paged in insertion order) lists begins with their
// outcome; GET /v1/audit/export streams every sealed record as JSON lines;
// POST /v1/audit/verify (berth audit verify) checks the chains. A caller
// reads its own tenant's chains, the host admin every tenant's. The log
// (table audit_log, two rows per audited call) is not purged by the
// --retention sweep. TestSharedKeyVerifies and the e2e
// TestTwoDaemonsShareAuditKey hold the shared key; TestAnchorDetectsRewind
// and FuzzParseAnchor the anchor.
package audit

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/berth-sh/berth/internal/keyfile"
	"github.com/berth-sh/berth/internal/store"
)

// KeyFile is the file, in the data dir, holding the audit key. Daemons
// sharing one PostgreSQL database must share one key (serve
// --audit-key-file, OpenKeyFile), or each verifies only what it sealed.
const KeyFile = "audit.key"

// Log appends to and checks the audit chains of a store.
type Log struct {
	st  store.Audit
	key []byte
	now func() time.Time
	log *slog.Logger
}

// OpenKeyFile loads the audit key at path, which the operator made and
// shares between the daemons of one PostgreSQL store (serve
// --audit-key-file): it must exist (it is never made here: two daemons
// making their own would each seal with a different key), be a regular
// file readable by its owner only, and hold at least 32 bytes.
func OpenKeyFile(path string) ([]byte, error) { return keyfile.Read(path, "audit key") }

// OpenKey loads (creating on first use, mode 0600) the audit key in dataDir.
func OpenKey(dataDir string) ([]byte, error) {
	path := filepath.Join(dataDir, KeyFile)
	key, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("writing audit key: %w", err)
		}
		if _, err := f.Write(key); err != nil {
			f.Close()
			return nil, fmt.Errorf("writing audit key: %w", err)
		}
		if err := f.Close(); err != nil {
			return nil, fmt.Errorf("writing audit key: %w", err)
		}
		return key, nil
	} else if err != nil {
		return nil, fmt.Errorf("reading audit key: %w", err)
	}
	if len(key) < 32 {
		return nil, fmt.Errorf("audit key %s is too short", path)
	}
	return key, nil
}

// New returns the log over st sealing with key (at least 32 bytes).
func New(st store.Audit, key []byte, log *slog.Logger) *Log {
	if log == nil {
		log = slog.Default()
	}
	return &Log{st: st, key: key, now: func() time.Time { return time.Now().UTC() }, log: log}
}

// Seal is the HMAC-SHA256, hex, of r's canonical encoding: every field
// but ID and Hash, each length-prefixed, after a version tag. PrevHash is
// one of them, which links the chain.
func Seal(key []byte, r *store.AuditRecord) string {
	m := hmac.New(sha256.New, key)
	m.Write(Canonical(r))
	return hex.EncodeToString(m.Sum(nil))
}

// Canonical is the byte string a record's seal covers.
func Canonical(r *store.AuditRecord) []byte {
	var b []byte
	put := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	put("berth-audit-v1")
	put(r.Tenant)
	put(strconv.FormatInt(r.Seq, 10))
	put(r.Kind)
	put(strconv.FormatInt(r.Ref, 10))
	put(strconv.FormatInt(r.Time.UnixMicro(), 10))
	put(r.Actor)
	put(r.Action)
	put(r.Target)
	put(r.RequestID)
	put(r.Source)
	put(r.Result)
	put(r.PrevHash)
	return b
}

func (l *Log) seal(r *store.AuditRecord) string { return Seal(l.key, r) }

// Entry is what a begin says.
type Entry struct {
	Tenant    string
	Actor     string // "local", "key:<id>", "lease:<sandbox>", "system:<component>"
	Action    string // the route pattern, or "<component>.<action>" for system actions
	Target    string // the {id} or {name} acted on
	RequestID string
	Source    string // the caller's address
}

// Op is a begun action; Complete records its outcome.
type Op struct {
	l      *Log
	tenant string
	seq    int64
}

// Begin records e before it takes effect. A nil Log records nothing (and
// its Op completes nothing).
func (l *Log) Begin(ctx context.Context, e Entry) (*Op, error) {
	if l == nil {
		return nil, nil
	}
	r := &store.AuditRecord{Tenant: e.Tenant, Kind: store.AuditBegin, Time: l.now(), Actor: e.Actor, Action: e.Action,
		Target: e.Target, RequestID: e.RequestID, Source: e.Source}
	if err := l.st.AppendAudit(ctx, r, l.seal); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return &Op{l: l, tenant: e.Tenant, seq: r.Seq}, nil
}

// Complete records the outcome of the op. It runs under its own context:
// a request cancelled by its caller still has its outcome recorded.
func (o *Op) Complete(result string) {
	if o == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := &store.AuditRecord{Tenant: o.tenant, Kind: store.AuditOutcome, Ref: o.seq, Time: o.l.now(), Result: result}
	if err := o.l.st.AppendAudit(ctx, r, o.l.seal); err != nil {
		o.l.log.Error("audit: recording an outcome", "tenant", o.tenant, "seq", o.seq, "result", result, "err", err)
	}
}

// Result is the outcome text of an error: "ok", or "error: " and it.
func Result(err error) string {
	if err == nil {
		return "ok"
	}
	return "error: " + err.Error()
}

// System records a system action (actor "system:<component>") before it
// takes effect and returns the function completing it with its error.
func (l *Log) System(ctx context.Context, tenant, component, action, target string) func(error) {
	op, err := l.Begin(ctx, Entry{Tenant: tenant, Actor: "system:" + component, Action: component + "." + action, Target: target})
	if err != nil {
		l.log.Error("audit: recording a system action", "component", component, "action", action, "target", target, "err", err)
	}
	return func(err error) { op.Complete(Result(err)) }
}

// List returns a page of entries.
func (l *Log) List(ctx context.Context, f store.AuditFilter, p store.Page) ([]*store.AuditEntry, string, error) {
	return l.st.ListAudit(ctx, f, p)
}

// Export calls fn with every record o sees, by tenant then seq.
func (l *Log) Export(ctx context.Context, o store.Owner, fn func(*store.AuditRecord) error) error {
	return l.st.ScanAudit(ctx, o, fn)
}

// Report is what Verify found.
type Report struct {
	OK      bool  `json:"ok"`
	Checked int64 `json:"checked"` // records checked
	// Pending counts begins without an outcome (a crash, or in flight).
	Pending int64 `json:"pending"`
	// Bad is the first record found wrong, if any.
	Bad *Bad `json:"bad,omitempty"`
}

// Bad names a record that fails verification and why.
type Bad struct {
	Tenant string `json:"tenant"`
	Seq    int64  `json:"seq"`
	Reason string `json:"reason"`
}

var errStop = errors.New("stop")

// Verify checks every chain o sees: seqs 1, 2, ... without gaps, each
// prev_hash the previous record's hash, each hash the record's seal, each
// outcome completing an earlier begin of its chain once, and each chain
// ending at its head row.
func (l *Log) Verify(ctx context.Context, o store.Owner) (*Report, error) {
	heads, err := l.st.AuditHeads(ctx, o)
	if err != nil {
		return nil, err
	}
	rep := &Report{}
	var (
		tenant  string
		started bool
		last    store.AuditRecord
		open    map[int64]bool // begins without an outcome yet
	)
	bad := func(t string, seq int64, format string, args ...any) error {
		rep.Bad = &Bad{Tenant: t, Seq: seq, Reason: fmt.Sprintf(format, args...)}
		return errStop
	}
	endChain := func() error {
		if !started {
			return nil
		}
		rep.Pending += int64(len(open))
		h, ok := heads[tenant]
		delete(heads, tenant)
		switch {
		case !ok:
			return bad(tenant, last.Seq, "the chain has no head record")
		case h.Seq != last.Seq || h.Hash != last.Hash:
			return bad(tenant, last.Seq+1, "the chain ends at seq %d but its head is seq %d: records were removed from its end, or the head edited", last.Seq, h.Seq)
		}
		return nil
	}
	err = l.st.ScanAudit(ctx, o, func(r *store.AuditRecord) error {
		if !started || r.Tenant != tenant {
			if err := endChain(); err != nil {
				return err
			}
			tenant, started, last, open = r.Tenant, true, store.AuditRecord{}, map[int64]bool{}
		}
		switch {
		case r.Seq != last.Seq+1:
			return bad(r.Tenant, last.Seq+1, "record %d is missing (the next is %d)", last.Seq+1, r.Seq)
		case r.PrevHash != last.Hash:
			return bad(r.Tenant, r.Seq, "its prev_hash is not the hash of record %d: reordered or replaced", last.Seq)
		case !hmac.Equal([]byte(r.Hash), []byte(l.seal(r))):
			return bad(r.Tenant, r.Seq, "its hash does not match its contents: edited")
		}
		switch r.Kind {
		case store.AuditBegin:
			open[r.Seq] = true
		case store.AuditOutcome:
			if !open[r.Ref] {
				return bad(r.Tenant, r.Seq, "an outcome of record %d, which is no open begin", r.Ref)
			}
			delete(open, r.Ref)
		default:
			return bad(r.Tenant, r.Seq, "unknown kind %q", r.Kind)
		}
		rep.Checked++
		last = *r
		return nil
	})
	if err == nil {
		err = endChain()
	}
	if err == nil {
		for t, h := range heads {
			if h.Seq > 0 {
				err = bad(t, 1, "the chain's head is seq %d but it has no records", h.Seq)
				break
			}
		}
	}
	if errors.Is(err, errStop) {
		return rep, nil
	}
	if err != nil {
		return nil, err
	}
	rep.OK = true
	return rep, nil
}
