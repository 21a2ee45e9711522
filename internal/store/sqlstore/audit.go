package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"sync"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

const auditCols = `id, tenant, seq, kind, ref, at, actor, action, target, request_id, source, result, prev_hash, hash`

var byAuditID = order{list: "audit", at: "b.id"}

func scanAudit(sc scanner) (*store.AuditRecord, error) {
	var (
		r  store.AuditRecord
		at int64
	)
	if err := sc.Scan(&r.ID, &r.Tenant, &r.Seq, &r.Kind, &r.Ref, &at, &r.Actor, &r.Action, &r.Target,
		&r.RequestID, &r.Source, &r.Result, &r.PrevHash, &r.Hash); err != nil {
		return nil, err
	}
	r.Time = fromMicros(at)
	return &r, nil
}

// AppendAudit serialises appenders per tenant on the chain's head row:
// the UPDATE that takes the next seq holds the row's lock until commit
// (PostgreSQL; SQLite's single writer serialises anyway), so a second
// appender reads the head only after the first's record is in.
func (s *sqlStore) AppendAudit(ctx context.Context, r *store.AuditRecord, seal func(*store.AuditRecord) string) error {
	if r.Kind != store.AuditBegin && r.Kind != store.AuditOutcome {
		return errdefs.Invalid("audit record kind %q", r.Kind)
	}
	if r.Time.IsZero() {
		return errdefs.Invalid("audit record without a time")
	}
	rec := *r
	err := s.inTx(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		if s.d.GroupCommit {
			if done, err := s.appendAfterKnownHead(ctx, tx, &rec, seal); done || err != nil {
				return err
			}
		}
		// The tenant's head moves on by one and gives the hash it held:
		// one statement (an upsert returning the row) where it was three.
		if err := s.txQueryRow(ctx, tx, s.d.rebind(`INSERT INTO audit_heads (tenant, seq, hash) VALUES (?, 1, '')
			ON CONFLICT (tenant) DO UPDATE SET seq = audit_heads.seq + 1 RETURNING seq, hash`), rec.Tenant).
			Scan(&rec.Seq, &rec.PrevHash); err != nil {
			return fmt.Errorf("audit head: %w", err)
		}
		if err := checkAuditRef(&rec); err != nil {
			return err
		}
		rec.Hash = seal(&rec)
		if err := s.insertAudit(ctx, tx, &rec); err != nil {
			return err
		}
		if _, err := s.txExec(ctx, tx, s.d.rebind(`UPDATE audit_heads SET hash = ? WHERE tenant = ?`), rec.Hash, rec.Tenant); err != nil {
			return fmt.Errorf("audit head: %w", err)
		}
		if s.d.GroupCommit {
			s.heads.put(rec.Tenant, auditHead{rec.Seq, rec.Hash})
		}
		return nil
	})
	if err != nil {
		return err
	}
	rec.Time = fromMicros(micros(rec.Time))
	*r = rec
	return nil
}

// checkAuditRef refuses an outcome that names no earlier record.
func checkAuditRef(rec *store.AuditRecord) error {
	if rec.Kind == store.AuditOutcome && (rec.Ref <= 0 || rec.Ref >= rec.Seq) {
		return errdefs.Invalid("audit outcome refers to record %d of %d", rec.Ref, rec.Seq)
	}
	return nil
}

func (s *sqlStore) insertAudit(ctx context.Context, tx *sql.Tx, rec *store.AuditRecord) error {
	if _, err := s.txExec(ctx, tx, s.d.rebind(`INSERT INTO audit_log (tenant, seq, kind, ref, at, actor, action, target,
		request_id, source, result, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		rec.Tenant, rec.Seq, rec.Kind, rec.Ref, micros(rec.Time), rec.Actor, rec.Action, rec.Target,
		rec.RequestID, rec.Source, rec.Result, rec.PrevHash, rec.Hash); err != nil {
		return fmt.Errorf("append audit record: %w", err)
	}
	return nil
}

// auditHeads remembers, on a store with one writer (Dialect.GroupCommit:
// SQLite), each tenant's chain head as this store last wrote it, so an
// append seals its record from it and moves the head with one
// compare-and-swap (two statements, where reading the head first takes
// three; an audited call appends two records). The memory is a guess,
// never the truth: the swap names the seq and hash it expects, and a head
// that is not that (a batch rolled back after the append, a head edited
// by hand) fails it, and the append reads the head as it is.
type auditHeads struct {
	mu sync.Mutex
	m  map[string]auditHead
}

type auditHead struct {
	seq  int64
	hash string
}

func (h *auditHeads) get(tenant string) (auditHead, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[tenant]
	return v, ok
}

func (h *auditHeads) put(tenant string, v auditHead) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]auditHead{}
	}
	h.m[tenant] = v
}

func (h *auditHeads) forget(tenant string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, tenant)
}

// appendAfterKnownHead appends rec after the head this store remembers
// for its tenant; done is false (nothing written) when it remembers none
// or the head in the database is another.
func (s *sqlStore) appendAfterKnownHead(ctx context.Context, tx *sql.Tx, rec *store.AuditRecord, seal func(*store.AuditRecord) string) (done bool, err error) {
	h, ok := s.heads.get(rec.Tenant)
	if !ok {
		return false, nil
	}
	rec.Seq, rec.PrevHash = h.seq+1, h.hash
	if err := checkAuditRef(rec); err != nil {
		return true, err
	}
	rec.Hash = seal(rec)
	res, err := s.txExec(ctx, tx, s.d.rebind(`UPDATE audit_heads SET seq = ?, hash = ? WHERE tenant = ? AND seq = ? AND hash = ?`),
		rec.Seq, rec.Hash, rec.Tenant, h.seq, h.hash)
	if err != nil {
		return true, fmt.Errorf("audit head: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		s.heads.forget(rec.Tenant)
		return false, nil
	}
	if err := s.insertAudit(ctx, tx, rec); err != nil {
		return true, err
	}
	s.heads.put(rec.Tenant, auditHead{rec.Seq, rec.Hash})
	return true, nil
}

func (s *sqlStore) ListAudit(ctx context.Context, f store.AuditFilter, p store.Page) ([]*store.AuditEntry, string, error) {
	q := pageQuery{base: `SELECT b.id, b.tenant, b.seq, b.at, b.actor, b.action, b.target, b.request_id, b.source,
		COALESCE(o.result, ?), COALESCE(o.at, 0)
		FROM audit_log b LEFT JOIN audit_log o ON o.tenant = b.tenant AND o.kind = ? AND o.ref = b.seq`}
	q.args = append(q.args, store.AuditPending, store.AuditOutcome)
	q.and("b.kind = ?", store.AuditBegin)
	q.owner(f.Owner, "b.tenant")
	if !f.Since.IsZero() {
		q.and("b.at >= ?", micros(f.Since))
	}
	if !f.Until.IsZero() {
		q.and("b.at < ?", micros(f.Until))
	}
	if f.Actor != "" {
		q.and("b.actor = ?", f.Actor)
	}
	if f.Action != "" {
		q.and("b.action = ?", f.Action)
	}
	if f.Target != "" {
		q.and("b.target = ?", f.Target)
	}
	return listPage(ctx, s, q, byAuditID, p, func(sc scanner) (*store.AuditEntry, error) {
		var (
			e        store.AuditEntry
			at, done int64
		)
		if err := sc.Scan(&e.ID, &e.Tenant, &e.Seq, &at, &e.Actor, &e.Action, &e.Target, &e.RequestID, &e.Source,
			&e.Result, &done); err != nil {
			return nil, err
		}
		e.Time, e.CompletedAt = fromMicros(at), fromMicros(done)
		return &e, nil
	}, func(e *store.AuditEntry) (int64, string) { return e.ID, "" })
}

// auditBatch is how many records ScanAudit reads per query, so a long
// chain is never one open cursor.
const auditBatch = 500

func (s *sqlStore) ScanAudit(ctx context.Context, o store.Owner, fn func(*store.AuditRecord) error) error {
	tenant, seq := "", int64(0)
	first := true
	for {
		q := `SELECT ` + auditCols + ` FROM audit_log WHERE `
		var args []any
		if first {
			q += `1 = 1`
		} else {
			q += `(tenant > ? OR (tenant = ? AND seq > ?))`
			args = append(args, tenant, tenant, seq)
		}
		if t, ok := o.Tenant(); ok {
			q += ` AND tenant = ?`
			args = append(args, t)
		}
		q += ` ORDER BY tenant, seq LIMIT ?`
		args = append(args, auditBatch)
		recs, err := s.auditRows(ctx, q, args...)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if err := fn(r); err != nil {
				return err
			}
		}
		if len(recs) < auditBatch {
			return nil
		}
		last := recs[len(recs)-1]
		tenant, seq, first = last.Tenant, last.Seq, false
	}
}

func (s *sqlStore) auditRows(ctx context.Context, q string, args ...any) ([]*store.AuditRecord, error) {
	rows, err := s.query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("scan audit: %w", err)
	}
	defer rows.Close()
	var out []*store.AuditRecord
	for rows.Next() {
		r, err := scanAudit(rows)
		if err != nil {
			return nil, fmt.Errorf("scan audit: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("scan audit: %w", err)
	}
	return out, nil
}

func (s *sqlStore) AuditHeads(ctx context.Context, o store.Owner) (map[string]store.AuditHead, error) {
	q := `SELECT tenant, seq, hash FROM audit_heads`
	var args []any
	if t, ok := o.Tenant(); ok {
		q += ` WHERE tenant = ?`
		args = append(args, t)
	}
	rows, err := s.query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("audit heads: %w", err)
	}
	defer rows.Close()
	out := map[string]store.AuditHead{}
	for rows.Next() {
		var (
			t string
			h store.AuditHead
		)
		if err := rows.Scan(&t, &h.Seq, &h.Hash); err != nil {
			return nil, fmt.Errorf("audit heads: %w", err)
		}
		out[t] = h
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("audit heads: %w", err)
	}
	return out, nil
}
