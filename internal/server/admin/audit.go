package admin

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
)

// auditOwner is whose audit chains a caller reads: its tenant's; the host
// operator on the unix socket reads every tenant's.
func auditOwner(r *http.Request) store.Owner {
	if p, ok := auth.From(r.Context()); ok && p.Actor == auth.Admin.Actor {
		return store.AnyOwner
	}
	return rest.OwnerOf(r.Context())
}

// auditFilter reads GET /v1/audit's query: since and until (RFC 3339),
// actor, action, target.
func auditFilter(r *http.Request) (store.AuditFilter, error) {
	q := r.URL.Query()
	f := store.AuditFilter{Owner: auditOwner(r), Actor: q.Get("actor"), Action: q.Get("action"), Target: q.Get("target")}
	for _, tm := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		v := q.Get(tm.name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return f, errdefs.Invalid("%s must be an RFC 3339 time (2006-01-02T15:04:05Z)", tm.name)
		}
		*tm.dst = t
	}
	for _, v := range []struct{ name, val string }{{"actor", f.Actor}, {"action", f.Action}, {"target", f.Target}} {
		if err := checkAuditText(v.name, v.val); err != nil {
			return f, err
		}
	}
	return f, nil
}

// checkAuditText refuses a filter value no record can hold: control
// characters (PostgreSQL refuses a NUL outright) or past 512 bytes.
func checkAuditText(name, v string) error {
	if len(v) > 512 {
		return errdefs.Invalid("%s is longer than 512 bytes", name)
	}
	for i, c := range v {
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) || c == 0xfffd {
			return errdefs.Invalid("%s has a control character or invalid UTF-8 at offset %d", name, i)
		}
	}
	return nil
}

func (h *Handlers) auditLog() (*audit.Log, error) {
	if h.opts().Audit == nil {
		return nil, errdefs.NotSupported("this daemon keeps no audit log")
	}
	return h.opts().Audit, nil
}

// ListAudit serves GET /v1/audit.
func (h *Handlers) ListAudit(w http.ResponseWriter, r *http.Request) {
	l, err := h.auditLog()
	if err != nil {
		rest.Error(w, err)
		return
	}
	f, err := auditFilter(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	p, err := rest.PageOf(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	es, next, err := l.List(r.Context(), f, p)
	if err != nil {
		rest.Error(w, err)
		return
	}
	out := make([]api.AuditEntry, 0, len(es))
	for _, e := range es {
		out = append(out, api.AuditEntry{Tenant: e.Tenant, Seq: e.Seq, Time: e.Time, Actor: e.Actor, Action: e.Action,
			Target: e.Target, RequestID: e.RequestID, Source: e.Source, Result: e.Result, CompletedAt: e.CompletedAt})
	}
	rest.SetNext(w, next)
	rest.JSON(w, http.StatusOK, out)
}

// ExportAudit streams every record of the caller's chains as JSON lines,
// by tenant then seq: what an offline verifier holding the key needs.
func (h *Handlers) ExportAudit(w http.ResponseWriter, r *http.Request) {
	l, err := h.auditLog()
	if err != nil {
		rest.Error(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	err = l.Export(r.Context(), auditOwner(r), func(rec *store.AuditRecord) error {
		return enc.Encode(api.AuditRecord{Tenant: rec.Tenant, Seq: rec.Seq, Kind: rec.Kind, Ref: rec.Ref, Time: rec.Time,
			Actor: rec.Actor, Action: rec.Action, Target: rec.Target, RequestID: rec.RequestID, Source: rec.Source,
			Result: rec.Result, PrevHash: rec.PrevHash, Hash: rec.Hash})
	})
	if err != nil {
		// The status is sent: cut the stream so the caller sees it short.
		h.logger().Error("audit export cut short", "err", err)
		panic(http.ErrAbortHandler)
	}
}

// verifyAnchor checks the chains the caller sees against an anchor this
// daemon signed (its own key, never one the anchor names).
func (h *Handlers) verifyAnchor(r *http.Request, l *audit.Log, raw []byte) (*audit.Report, error) {
	if len(h.opts().AuditAnchorKey) == 0 {
		return nil, errdefs.Unavailable("this daemon signs no audit anchors")
	}
	a, err := audit.ParseAnchor(raw)
	if err != nil {
		return nil, errdefs.Invalid("%v", err)
	}
	if err := audit.CheckSignature(a, h.opts().AuditAnchorKey); err != nil {
		return nil, errdefs.Invalid("%v", err)
	}
	return l.VerifyAnchor(r.Context(), auditOwner(r), a)
}

// VerifyAudit serves POST /v1/audit/verify.
func (h *Handlers) VerifyAudit(w http.ResponseWriter, r *http.Request) {
	l, err := h.auditLog()
	if err != nil {
		rest.Error(w, err)
		return
	}
	var req api.AuditVerifyRequest
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		if err := input.Decode(r, &req); err != nil {
			rest.Error(w, err)
			return
		}
	}
	var rep *audit.Report
	if len(req.Anchor) > 0 {
		rep, err = h.verifyAnchor(r, l, req.Anchor)
	} else {
		rep, err = l.Verify(r.Context(), auditOwner(r))
	}
	if err != nil {
		rest.Error(w, err)
		return
	}
	out := api.AuditVerify{OK: rep.OK, Checked: rep.Checked, Pending: rep.Pending}
	if rep.Bad != nil {
		out.Bad = &api.AuditBad{Tenant: rep.Bad.Tenant, Seq: rep.Bad.Seq, Reason: rep.Bad.Reason}
	}
	rest.JSON(w, http.StatusOK, out)
}
