package server

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/access"
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
		if e.Result != "ok 299" || e.Actor != h.p.Actor || !strings.HasPrefix(e.Actor, "key:") && !rt.Op.Rule().Public || e.Target != wantTarget ||
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
		Route{Pattern: HostPortPattern, Op: access.Health, h: hf(func(w http.ResponseWriter, r *http.Request) {})},
		Route{Pattern: "/", Op: access.Read, h: hf(func(w http.ResponseWriter, r *http.Request) {})})
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
		Route{Pattern: "POST /v1/things/{id}", Op: access.SandboxPause, h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran++
			es, _, err := st.ListAudit(ctx, store.AuditFilter{Owner: store.AnyOwner, Target: r.PathValue("id")}, store.Page{})
			sawPending = err == nil && len(es) == 1 && es[0].Result == store.AuditPending
			rest.Error(w, errdefs.Conflict("thing %s is busy", r.PathValue("id")))
		})},
		Route{Pattern: "DELETE /v1/things/{id}", Op: access.SandboxDelete, h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	if es[0].Result != "error 409" || es[0].Actor != auth.Admin.Actor || es[0].Source != "192.0.2.7:4242" || es[0].Action != access.SandboxPause.Action() {
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

// TestAuditedRoutesAreMutating: the catalogue (internal/access) records
// exactly the routes that change something — every route with a method
// other than GET and the WebSocket exec and process attach — each under
// its own pattern, so a row reads the same as before the catalogue held
// the actions and names one route.
func TestAuditedRoutesAreMutating(t *testing.T) {
	for _, rt := range Routes() {
		method, _, hasMethod := strings.Cut(rt.Pattern, " ")
		want := hasMethod && (method != http.MethodGet || rt.Pattern == "GET /v1/sandboxes/{id}/exec/ws" ||
			rt.Pattern == "GET /v1/sandboxes/{id}/processes/{pid}/ws")
		if Audited(rt) != want {
			t.Errorf("%s (%s): audited %v, want %v", rt.Pattern, rt.Op, Audited(rt), want)
		}
		if Audited(rt) && rt.Op.Action() != rt.Pattern {
			t.Errorf("%s is recorded as %q (operation %s)", rt.Pattern, rt.Op.Action(), rt.Op)
		}
	}
}
