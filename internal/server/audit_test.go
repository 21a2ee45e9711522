package server

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/sqlite"
)

var testAuditKey = []byte("server-test-audit-key-0123456789abcdef")

func openAuditStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "audit.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestEveryMutatingRouteAudited calls every route of the real table once
// as an API key: each audited one (every non-GET route and the WebSocket
// exec) leaves exactly one entry naming its route, target, caller and
// request id, completed with the answer's status; every other leaves
// none. A route added without audit fails here.
func TestEveryMutatingRouteAudited(t *testing.T) {
	f := newFixture(t)
	st := openAuditStore(t)
	f.s.Audit = audit.New(st, testAuditKey, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := context.Background()
	audited := 0
	for _, rt := range f.s.Routes() {
		method, path, host := target(rt, "sb1", "8080")
		w, h, ok := f.do(t, method, path, host, "admin")
		if !ok || h == nil {
			t.Fatalf("%s: the handler did not run (status %d)", rt.Pattern, w.Code)
		}
		es, _, err := st.ListAudit(ctx, store.AuditFilter{Owner: store.AnyOwner, Action: rt.Pattern}, store.Page{})
		if err != nil {
			t.Fatal(err)
		}
		if !Audited(rt) {
			if len(es) != 0 {
				t.Errorf("%s is not audited but left %d entries", rt.Pattern, len(es))
			}
			continue
		}
		audited++
		if len(es) != 1 {
			t.Errorf("%s: %d audit entries, want 1", rt.Pattern, len(es))
			continue
		}
		e := es[0]
		wantTarget := "sb1"
		if strings.Contains(rt.Pattern, "{name}") {
			wantTarget = "base"
		} else if !strings.Contains(rt.Pattern, "{id}") {
			wantTarget = ""
		}
		if e.Result != "ok 299" || e.Actor != h.p.Actor || !strings.HasPrefix(e.Actor, "key:") && !rt.Rule.Public || e.Target != wantTarget ||
			e.RequestID == "" || e.RequestID != w.Header().Get(RequestIDHeader) || e.CompletedAt.IsZero() {
			t.Errorf("%s: entry %+v; want result ok 299, actor %s, target %q, request id %s", rt.Pattern, e, h.p.Actor, wantTarget,
				w.Header().Get(RequestIDHeader))
		}
	}
	if audited < 30 {
		t.Errorf("only %d routes audited: the table has more mutating routes", audited)
	}
	rep, err := f.s.Audit.Verify(ctx, store.AnyOwner)
	if err != nil || !rep.OK || rep.Pending != 0 || rep.Checked != int64(2*audited) {
		t.Errorf("Verify = %+v, %v; want ok with %d records and none pending", rep, err, 2*audited)
	}
}

// auditServer is a server of a few routes with handlers of the test's, on
// the trusted socket, auditing into st.
func auditServer(t *testing.T, st store.Store, routes ...Route) http.Handler {
	t.Helper()
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: newMetrics()}
	s.Audit = audit.New(st, testAuditKey, s.log)
	hf := func(f http.HandlerFunc) http.Handler { return f }
	routes = append(routes,
		Route{Pattern: HostPortPattern, Rule: public, h: hf(func(w http.ResponseWriter, r *http.Request) {})},
		Route{Pattern: "/", Rule: need(read), h: hf(func(w http.ResponseWriter, r *http.Request) {})})
	s.mount(routes)
	return s.Handler(true)
}

func send(t *testing.T, h http.Handler, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(method + " " + path + " HTTP/1.1\r\nHost: x\r\n\r\n")))
	if err != nil {
		t.Fatal(err)
	}
	r.RemoteAddr = "192.0.2.7:4242"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestAuditBeforeAndOutcome: the begin record exists while the handler
// runs (written before the call takes effect); a failed call is completed
// with its error status; a handler that panics is completed as aborted; a
// call whose begin cannot be written is refused without running.
func TestAuditBeforeAndOutcome(t *testing.T) {
	st := openAuditStore(t)
	ctx := context.Background()
	sawPending := false
	ran := 0
	h := auditServer(t, st,
		Route{Pattern: "POST /v1/things/{id}", Rule: need(write), h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran++
			es, _, err := st.ListAudit(ctx, store.AuditFilter{Owner: store.AnyOwner, Target: r.PathValue("id")}, store.Page{})
			sawPending = err == nil && len(es) == 1 && es[0].Result == store.AuditPending
			rest.Error(w, errdefs.Conflict("thing %s is busy", r.PathValue("id")))
		})},
		Route{Pattern: "DELETE /v1/things/{id}", Rule: need(write), h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			panic("boom")
		})},
	)
	if w := send(t, h, "POST", "/v1/things/t1"); w.Code != http.StatusConflict {
		t.Fatalf("POST: %d", w.Code)
	}
	if !sawPending {
		t.Error("the handler ran without a pending audit entry of its call")
	}
	if w := send(t, h, "DELETE", "/v1/things/t2"); w.Code != http.StatusInternalServerError {
		t.Fatalf("DELETE with a panicking handler: %d", w.Code)
	}
	es, _, err := st.ListAudit(ctx, store.AuditFilter{Owner: store.AnyOwner}, store.Page{})
	if err != nil || len(es) != 2 {
		t.Fatalf("entries %v, %v", es, err)
	}
	if es[0].Result != "error 409" || es[0].Actor != auth.Admin.Actor || es[0].Source != "192.0.2.7:4242" || es[0].Action != "POST /v1/things/{id}" {
		t.Errorf("failed call's entry %+v", es[0])
	}
	if es[1].Result != "error: handler aborted" || es[1].Target != "t2" {
		t.Errorf("panicked call's entry %+v", es[1])
	}
	if rep, err := audit.New(st, testAuditKey, nil).Verify(ctx, store.AnyOwner); err != nil || !rep.OK || rep.Checked != 4 {
		t.Errorf("Verify = %+v, %v", rep, err)
	}
	st.Close()
	before := ran
	if w := send(t, h, "POST", "/v1/things/t3"); w.Code != http.StatusServiceUnavailable {
		t.Errorf("a call that cannot be audited: %d, want 503", w.Code)
	}
	if ran != before {
		t.Error("the handler of a call that could not be audited ran")
	}
}

// TestAuditFilterRefusesBadInput: malformed times and control characters
// in the filters are 400s naming the field.
func TestAuditFilterRefusesBadInput(t *testing.T) {
	st := openAuditStore(t)
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: newMetrics()}
	s.Audit = audit.New(st, testAuditKey, s.log)
	for _, q := range []string{"since=yesterday", "until=2026-13-01T00:00:00Z", "actor=a%00b", "target=%7f", "action=" + strings.Repeat("a", 513), "limit=0", "cursor=zz"} {
		r := httptest.NewRequest("GET", "/v1/audit?"+q, nil)
		w := httptest.NewRecorder()
		s.listAudit(w, r)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "invalid_argument") {
			t.Errorf("%s: %d %s", q, w.Code, w.Body.String())
		}
	}
}

// FuzzAuditFilter: whatever the query, the filter parser answers (a
// filter or ErrInvalid) and an accepted filter holds no control character.
func FuzzAuditFilter(f *testing.F) {
	for _, s := range []string{"since=2026-01-02T03:04:05Z&actor=key:abc", "target=sb1&action=POST+/v1/sandboxes", "until=x", "actor=%00", "actor=%c2%85"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		r := &http.Request{URL: &url.URL{RawQuery: q}}
		af, err := auditFilter(r)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("%q: %v is not invalid_argument", q, err)
			}
			return
		}
		for _, v := range []string{af.Actor, af.Action, af.Target} {
			if checkAuditText("x", v) != nil {
				t.Fatalf("%q: accepted %q", q, v)
			}
		}
	})
}

// TestAuditReadScope: an API key reads its own tenant's chains only; the
// host operator on the unix socket reads every tenant's.
func TestAuditReadScope(t *testing.T) {
	st := openAuditStore(t)
	ctx := context.Background()
	l := audit.New(st, testAuditKey, nil)
	for _, tenant := range []string{"", "acme"} {
		op, err := l.Begin(ctx, audit.Entry{Tenant: tenant, Actor: "key:x", Action: "POST /v1/volumes"})
		if err != nil {
			t.Fatal(err)
		}
		op.Complete("ok 201")
	}
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: newMetrics(), Audit: l}
	for _, tc := range []struct {
		name string
		p    auth.Principal
		want int
	}{
		{"host operator", auth.Admin, 2},
		{"acme's admin key", auth.Principal{Actor: "key:k", KeyID: "k", Tenant: "acme", Scopes: []string{string(auth.ScopeAdmin)}}, 1},
		{"default tenant's admin key", auth.Principal{Actor: "key:d", KeyID: "d", Scopes: []string{string(auth.ScopeAdmin)}}, 1},
	} {
		r := httptest.NewRequest("GET", "/v1/audit", nil)
		r = r.WithContext(rest.WithCaller(r.Context(), tc.p))
		w := httptest.NewRecorder()
		s.listAudit(w, r)
		var es []map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &es); err != nil || w.Code != 200 || len(es) != tc.want {
			t.Errorf("%s: %d %s; want %d entries", tc.name, w.Code, w.Body.String(), tc.want)
		}
		r = httptest.NewRequest("POST", "/v1/audit/verify", nil)
		r = r.WithContext(rest.WithCaller(r.Context(), tc.p))
		w = httptest.NewRecorder()
		s.verifyAudit(w, r)
		var v struct {
			OK      bool
			Checked int
		}
		if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil || !v.OK || v.Checked != 2*tc.want {
			t.Errorf("%s: verify %s; want ok with %d records", tc.name, w.Body.String(), 2*tc.want)
		}
	}
}

// TestAuditVerifyAnchor: POST /v1/audit/verify with an anchor checks it
// with the daemon's own key (a forged one is 400) and the chains against
// it; without a key configured the anchor check is unavailable.
func TestAuditVerifyAnchor(t *testing.T) {
	st := openAuditStore(t)
	ctx := context.Background()
	l := audit.New(st, testAuditKey, nil)
	op, err := l.Begin(ctx, audit.Entry{Tenant: "acme", Actor: "key:x", Action: "POST /v1/volumes"})
	if err != nil {
		t.Fatal(err)
	}
	op.Complete("ok 201")
	key, err := audit.OpenAnchorKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, err := audit.OpenAnchorKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sign := func(k ed25519.PrivateKey) string {
		a, err := audit.NewAnchorer(st, k, filepath.Join(t.TempDir(), "a"), nil).Sign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(api.AuditVerifyRequest{Anchor: mustJSON(t, a)})
		return string(b)
	}
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: newMetrics(), Audit: l}
	verify := func(body string) (int, string) {
		r := httptest.NewRequest("POST", "/v1/audit/verify", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r = r.WithContext(rest.WithCaller(r.Context(), auth.Admin))
		w := httptest.NewRecorder()
		s.verifyAudit(w, r)
		return w.Code, w.Body.String()
	}
	good := sign(key)
	if code, b := verify(good); code != 503 {
		t.Errorf("no anchor key: %d %s, want 503", code, b)
	}
	s.AuditAnchorKey = key.Public().(ed25519.PublicKey)
	if code, b := verify(good); code != 200 || !strings.Contains(b, `"ok": true`) {
		t.Errorf("a good anchor: %d %s", code, b)
	}
	if code, b := verify(sign(other)); code != 400 {
		t.Errorf("an anchor of another key: %d %s, want 400", code, b)
	}
	if code, b := verify(`{"anchor":{"version":1}}`); code != 400 {
		t.Errorf("an unsigned anchor: %d %s, want 400", code, b)
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
