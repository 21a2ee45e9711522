package api

import (
	"encoding/json"
	"time"
)

// AuditEntry is one audited action (GET /v1/audit): when it began, who did
// what to which target, and its outcome ("pending" while — or, after a
// crash, for ever — none was recorded). Request bodies are never recorded.
type AuditEntry struct {
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

// AuditRecord is one sealed record of a tenant's chain, as exported (GET
// /v1/audit/export, JSON lines): a "begin" or an "outcome" (Ref names its
// begin's Seq), its predecessor's hash and its own HMAC-SHA256 seal.
type AuditRecord struct {
	Tenant    string    `json:"tenant"`
	Seq       int64     `json:"seq"`
	Kind      string    `json:"kind"`
	Ref       int64     `json:"ref,omitempty"`
	Time      time.Time `json:"time"`
	Actor     string    `json:"actor,omitempty"`
	Action    string    `json:"action,omitempty"`
	Target    string    `json:"target,omitempty"`
	RequestID string    `json:"request_id,omitempty"`
	Source    string    `json:"source,omitempty"`
	Result    string    `json:"result,omitempty"`
	PrevHash  string    `json:"prev_hash"`
	Hash      string    `json:"hash"`
}

// AuditVerifyRequest is the (optional) body of POST /v1/audit/verify:
// an anchor the daemon wrote (serve --audit-anchor-file), whose signature
// it checks with its own key and whose chain heads must still be in the
// chains — a chain cut and its head rewound below them fails.
type AuditVerifyRequest struct {
	Anchor json.RawMessage `json:"anchor,omitempty"`
}

// AuditVerify is the answer of POST /v1/audit/verify.
type AuditVerify struct {
	OK      bool  `json:"ok"`
	Checked int64 `json:"checked"`
	Pending int64 `json:"pending"`
	// Bad is the first record found wrong.
	Bad *AuditBad `json:"bad,omitempty"`
}

// AuditBad names a record that fails verification.
type AuditBad struct {
	Tenant string `json:"tenant"`
	Seq    int64  `json:"seq"`
	Reason string `json:"reason"`
}
