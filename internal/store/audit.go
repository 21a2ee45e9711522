package store

import (
	"context"
	"time"
)

// Audit record kinds. Every audited action is two records of its tenant's
// chain: a begin, written before the action takes effect, and an outcome
// naming the begin's Seq (Ref), written when its result is known. Records
// are never updated, so completing an action extends the chain instead of
// rewriting a sealed record.
const (
	AuditBegin   = "begin"
	AuditOutcome = "outcome"
)

// AuditPending is the result an entry shows while (or, after a crash, for
// ever) no outcome record follows its begin.
const AuditPending = "pending"

// AuditRecord is one sealed record of a tenant's audit chain.
type AuditRecord struct {
	// ID is the store's own row id (a global insertion order); it is not
	// part of the seal.
	ID     int64  `json:"-"`
	Tenant string `json:"tenant"`
	// Seq numbers the tenant's records 1, 2, 3, ... without gaps.
	Seq  int64  `json:"seq"`
	Kind string `json:"kind"`
	// Ref is, for an outcome, the Seq of the begin it completes.
	Ref       int64     `json:"ref,omitempty"`
	Time      time.Time `json:"time"`
	Actor     string    `json:"actor"`
	Action    string    `json:"action"`
	Target    string    `json:"target,omitempty"`
	RequestID string    `json:"request_id,omitempty"`
	Source    string    `json:"source,omitempty"`
	Result    string    `json:"result,omitempty"`
	// PrevHash is the Hash of the tenant's record Seq-1 ("" for Seq 1);
	// Hash seals this record with it (see AppendAudit).
	PrevHash string `json:"prev_hash"`
	Hash     string `json:"hash"`
}

// AuditEntry is an audited action as lists show it: its begin record with
// the result of its outcome (AuditPending if none).
type AuditEntry struct {
	ID          int64     `json:"-"`
	Tenant      string    `json:"tenant"`
	Seq         int64     `json:"seq"`
	Time        time.Time `json:"time"`
	Actor       string    `json:"actor"`
	Action      string    `json:"action"`
	Target      string    `json:"target,omitempty"`
	RequestID   string    `json:"request_id,omitempty"`
	Source      string    `json:"source,omitempty"`
	Result      string    `json:"result"`
	CompletedAt time.Time `json:"completed_at,omitzero"`
}

// AuditFilter selects entries in ListAudit; empty fields select all.
type AuditFilter struct {
	Owner        Owner
	Since, Until time.Time // begin time in [Since, Until)
	Actor        string
	Action       string
	Target       string
}

// AuditHead is the last record of a tenant's chain as the store keeps it
// beside the chain: a record removed from the end is missing against it.
type AuditHead struct {
	Seq  int64  `json:"seq"`
	Hash string `json:"hash"`
}

// Audit is the tamper-evident audit log: per tenant an append-only chain
// of records, each sealed over its predecessor's seal.
type Audit interface {
	// AppendAudit appends r to r.Tenant's chain: it sets r.Seq (the next
	// number), r.PrevHash (the chain head's Hash) and r.Hash = seal(r),
	// and writes the record and the new head in one transaction.
	// Concurrent appenders to one tenant (also several daemons on one
	// database) are serialised, so each chain stays gapless and linked.
	AppendAudit(ctx context.Context, r *AuditRecord, seal func(*AuditRecord) string) error
	// ListAudit returns a page of entries (begin records with their
	// outcome's result) in insertion order.
	ListAudit(ctx context.Context, f AuditFilter, p Page) ([]*AuditEntry, string, error)
	// ScanAudit calls fn with every record o sees, by tenant then Seq,
	// until fn returns an error (which it returns).
	ScanAudit(ctx context.Context, o Owner, fn func(*AuditRecord) error) error
	// AuditHeads returns the head of every chain o sees, by tenant.
	AuditHeads(ctx context.Context, o Owner) (map[string]AuditHead, error)
}
