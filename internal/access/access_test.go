package access

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/sqlite"
)

// TestCatalogue: every operation states a valid rule, every recorded one
// an action, and no two recorded operations share an action (a row names
// one operation, whichever door it came through).
func TestCatalogue(t *testing.T) {
	seen := map[string]Op{}
	for _, op := range Ops() {
		if !op.Rule().Valid() {
			t.Errorf("%s: invalid rule %+v", op, op.Rule())
		}
		a := op.Action()
		if a == "" {
			continue
		}
		if prev, ok := seen[a]; ok {
			t.Errorf("%s and %s are both recorded as %q", prev, op, a)
		}
		seen[a] = op
	}
	if Op("no.such").Known() || Op("no.such").Rule().Valid() {
		t.Error("an unknown operation has a rule")
	}
	if err := Authorize(auth.Admin, "no.such", ""); !errors.Is(err, errdefs.ErrPermission) {
		t.Errorf("an unknown operation: %v, want a refusal", err)
	}
}

// TestDecisions: the catalogue's decisions for the principals every door
// sees, on the operations the doors share.
func TestDecisions(t *testing.T) {
	viewer := auth.Principal{Actor: "key:v", Tenant: "t", Scopes: []string{string(auth.ScopeSandboxesRead)}}
	filesOnly := auth.Principal{Actor: "key:f", Tenant: "t", Scopes: []string{string(auth.ScopeSandboxesRead), string(auth.ScopeFiles)}}
	lease := auth.Principal{Actor: "lease:sb1", Sandbox: "sb1", Tenant: "t"}
	for _, s := range auth.LeaseScopes {
		lease.Scopes = append(lease.Scopes, string(s))
	}
	port := auth.Principal{Actor: "port:sb1", Sandbox: "sb1", Port: 8000, Tenant: "t", Scopes: []string{string(auth.ScopePorts)}}
	tenantAdmin := auth.Principal{Actor: "key:a", Tenant: "t", Scopes: []string{string(auth.ScopeAdmin)}}
	for _, c := range []struct {
		name    string
		p       auth.Principal
		op      Op
		sandbox string
		ok      bool
	}{
		{"viewer get", viewer, SandboxGet, "sb1", true},
		{"viewer exec", viewer, Exec, "sb1", false},
		{"viewer credentials", viewer, SandboxCredentials, "sb1", true},
		{"files-only write", filesOnly, FilesWrite, "sb1", true},
		{"files-only process", filesOnly, ProcessStart, "sb1", false},
		{"lease exec own", lease, Exec, "sb1", true},
		{"lease exec other", lease, Exec, "sb2", false},
		{"lease get own", lease, SandboxGet, "sb1", true},
		{"lease credentials", lease, SandboxCredentials, "sb1", false},
		{"lease create", lease, SandboxCreate, "", false},
		{"lease pause", lease, E2BPause, "sb1", false},
		{"lease network", lease, NetworkUpdate, "sb1", false},
		{"lease touch", lease, SandboxTouch, "sb1", true},
		{"port token port", port, Ports, "sb1", true},
		{"port token exec", port, Exec, "sb1", false},
		{"tenant admin host", tenantAdmin, HostRead, "", false},
		{"host admin host", auth.Admin, HostRead, "", true},
		{"anonymous health", auth.Anonymous, Health, "", true},
		{"anonymous read", auth.Anonymous, Read, "", false},
		{"mcp lease", lease, MCPCall, "", false},
	} {
		if err := Authorize(c.p, c.op, c.sandbox); (err == nil) != c.ok {
			t.Errorf("%s: %v, want allowed=%v", c.name, err, c.ok)
		}
	}
	if DataPlane(viewer) || !DataPlane(filesOnly) || !DataPlane(lease) {
		t.Error("DataPlane: a viewer has none, a files key and a lease have some")
	}
}

// TestPublicPort: a listed public port is open through every door while
// its sandbox exists; E2B's public traffic only through the E2B door,
// while the sandbox runs or waits to be woken.
func TestPublicPort(t *testing.T) {
	listed := &sandbox.Sandbox{State: sandbox.StateStopped, Spec: sandbox.Spec{PublicPorts: []int{8000}}}
	e2b := &sandbox.Sandbox{State: sandbox.StateRunning, Spec: sandbox.Spec{AllPortsPublic: true}}
	asleep := &sandbox.Sandbox{State: sandbox.StatePaused, Spec: sandbox.Spec{AllPortsPublic: true}}
	waking := &sandbox.Sandbox{State: sandbox.StatePaused, Spec: sandbox.Spec{AllPortsPublic: true}}
	waking.Spec.Policy.AutoResume = true
	gone := &sandbox.Sandbox{State: sandbox.StateDeleted, Spec: sandbox.Spec{PublicPorts: []int{8000}}}
	for _, c := range []struct {
		name string
		sb   *sandbox.Sandbox
		port int
		door Door
		want bool
	}{
		{"listed, REST", listed, 8000, DoorREST, true},
		{"listed, E2B", listed, 8000, DoorE2B, true},
		{"unlisted", listed, 8001, DoorREST, false},
		{"E2B traffic, REST", e2b, 8001, DoorREST, false},
		{"E2B traffic, E2B", e2b, 8001, DoorE2B, true},
		{"E2B traffic paused", asleep, 8001, DoorE2B, false},
		{"E2B traffic paused, auto-resume", waking, 8001, DoorE2B, true},
		{"deleted", gone, 8000, DoorREST, false},
		{"no sandbox", nil, 8000, DoorE2B, false},
	} {
		if got := PublicPort(c.sb, c.port, c.door); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

type request struct{ bad bool }

func (r request) Validate() error {
	if r.bad {
		return errdefs.Invalid("bad request")
	}
	return nil
}

// TestGate: a refused call leaves no record; an invalid one is recorded
// as its error; an allowed one as the operation's REST outcome; a call
// whose record cannot be written is refused before it runs.
func TestGate(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "audit.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := &Gate{Audit: audit.New(st, []byte("access-test-audit-key-0123456789abcdef"), log), Log: log}
	member := auth.Principal{Actor: "key:m", Tenant: "t", Scopes: []string{string(auth.ScopeSandboxesRead), string(auth.ScopeSandboxesWrite)}}
	ran := 0
	run := func() error { ran++; return nil }

	if err := g.Do(ctx, Call{P: member, Op: ProcessStart, Sandbox: "sb1"}, request{}, run); !errors.Is(err, errdefs.ErrPermission) {
		t.Errorf("a start without exec: %v", err)
	}
	exec := member
	exec.Scopes = append(exec.Scopes, string(auth.ScopeExec))
	if err := g.Do(ctx, Call{P: exec, Op: ProcessStart, Sandbox: "sb1"}, request{bad: true}, run); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("an invalid start: %v", err)
	}
	if err := g.Do(ctx, Call{P: exec, Op: ProcessStart, Sandbox: "sb1", Source: "192.0.2.1:1"}, request{}, run); err != nil {
		t.Errorf("a start: %v", err)
	}
	if err := g.Do(ctx, Call{P: exec, Op: Read}, nil, run); err != nil {
		t.Errorf("a read: %v", err)
	}
	// A door's translation runs inside the gate: after the decision (a
	// caller without the right is refused, unrecorded, whatever is wrong
	// with its request), and an untranslatable request is recorded as an
	// invalid one is.
	translated := 0
	untranslatable := func() (Validator, error) { translated++; return nil, errdefs.Invalid("process cmd is required") }
	if err := g.DoTranslated(ctx, Call{P: member, Op: ProcessStart, Sandbox: "sb1"}, untranslatable, run); !errors.Is(err, errdefs.ErrPermission) || translated != 0 {
		t.Errorf("an untranslatable start without exec: %v (translated %d)", err, translated)
	}
	if err := g.DoTranslated(ctx, Call{P: exec, Op: ProcessStart, Sandbox: "sb1"}, untranslatable, run); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("an untranslatable start: %v", err)
	}
	if err := g.DoTranslated(ctx, Call{P: exec, Op: ProcessStart, Sandbox: "sb1"}, func() (Validator, error) { return request{bad: true}, nil }, run); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("a translated invalid start: %v", err)
	}
	if ran != 2 {
		t.Errorf("ran %d calls, want 2", ran)
	}
	es, _, err := st.ListAudit(ctx, store.AuditFilter{Owner: store.AnyOwner}, store.Page{})
	if err != nil || len(es) != 4 {
		t.Fatalf("entries %+v, %v; want the invalid and the good start, the untranslatable and the translated invalid one", es, err)
	}
	for i, want := range []string{"error 400", "ok 201", "error 400", "error 400"} {
		e := es[i]
		if e.Result != want || e.Action != "POST /v1/sandboxes/{id}/processes" || e.Actor != "key:m" || e.Tenant != "t" || e.Target != "sb1" {
			t.Errorf("entry %d: %+v, want result %q", i, e, want)
		}
	}
	st.Close()
	if err := g.Do(ctx, Call{P: exec, Op: ProcessStart, Sandbox: "sb1"}, request{}, run); !errors.Is(err, errdefs.ErrUnavailable) || ran != 2 {
		t.Errorf("a start that cannot be recorded: %v (ran %d)", err, ran)
	}
}

// TestFileWriteBody: one file write's bound is the gate's, whichever door
// it came through: a declared length past it is refused at once, a body
// past it fails at the first byte over, both 413 too_large; a body of
// exactly the bound is read whole.
func TestFileWriteBody(t *testing.T) {
	if _, err := FileWriteBody(strings.NewReader("x"), MaxFileWriteBytes+1); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("declared past the bound: %v", err)
	}
	r, err := FileWriteBody(io.LimitReader(zeros{}, MaxFileWriteBytes+1), -1)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, r)
	if code, status := errdefs.Code(err); !errors.Is(err, errdefs.ErrTooLarge) || status != 413 || n > MaxFileWriteBytes {
		t.Errorf("a body past the bound: %d bytes read, %v (%s %d)", n, err, code, status)
	}
	r, _ = FileWriteBody(io.LimitReader(zeros{}, MaxFileWriteBytes), MaxFileWriteBytes)
	if n, err := io.Copy(io.Discard, r); err != nil || n != MaxFileWriteBytes {
		t.Errorf("a body of the bound: %d bytes, %v", n, err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// catalogueHomes may build rules and ask principals for scopes: the
// rules' grammar (internal/auth) and this catalogue.
var catalogueHomes = []string{"internal/auth", "internal/access"}

// TestNoRulesOutsideCatalogue fails when a package other than the
// catalogue's homes decides on its own: builds or names an auth.Rule,
// calls auth.Authorize (a door calls access.Authorize with an Op), or
// asks a principal for a scope (p.Has(auth.ScopeX)). Tests may.
func TestNoRulesOutsideCatalogue(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no module root at %s: %v", root, err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if name := d.Name(); name == "node_modules" || name == "testdata" || strings.HasPrefix(name, ".") && rel != "." {
				return filepath.SkipDir
			}
			for _, home := range catalogueHomes {
				if rel == home {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		checked++
		for _, bad := range decisions(t, path, rel) {
			t.Errorf("%s — name an access.Op instead", bad)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 200 {
		t.Fatalf("only %d files checked", checked)
	}
}

// decisions lists where the file at path decides on its own.
// rel names it in the positions.
func decisions(t *testing.T, path, rel string) []string {
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	name := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/berth-sh/berth/internal/auth" {
			name = "auth"
			if imp.Name != nil {
				name = imp.Name.Name
			}
		}
	}
	if name == "" {
		return nil
	}
	isAuth := func(e ast.Expr, sel func(string) bool) bool {
		s, ok := e.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		x, ok := s.X.(*ast.Ident)
		return ok && x.Name == name && sel(s.Sel.Name)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if isAuth(n, func(s string) bool { return s == "Rule" || s == "Authorize" }) {
				out = append(out, fset.Position(n.Pos()).String()+": auth."+n.Sel.Name)
			}
		case *ast.CallExpr:
			fn, ok := n.Fun.(*ast.SelectorExpr)
			if !ok || fn.Sel.Name != "Has" || len(n.Args) != 1 {
				return true
			}
			if isAuth(n.Args[0], func(s string) bool { return strings.HasPrefix(s, "Scope") }) {
				out = append(out, fset.Position(n.Pos()).String()+": a decision on a scope (Has)")
			}
		}
		return true
	})
	return out
}

// doorDirs are the doors' packages (and those below them): each
// translates its wire request and hands it to the gate, which validates
// it (Gate.Begin, Check). internal/server/input holds the JSON bodies'
// rule set, which it hands to Check.
var doorDirs = []string{"internal/server", "internal/e2b", "internal/mcp", "internal/agentsandbox"}

// TestNoValidationOutsideGate fails when a door validates a request
// itself (a call of a Validate method or function) instead of handing it
// to the gate: the gate validates every door's request of an operation
// with its type's one rule set, once, so no door can accept what another
// refuses, or refuse it without the record REST's refusal leaves. Tests
// may.
func TestNoValidationOutsideGate(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, dir := range doorDirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			if d.IsDir() {
				if rel == "internal/server/input" || d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			checked++
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					if s, ok := c.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "Validate" {
						t.Errorf("%s: a door validates a request itself — hand it to the gate (access.Gate.Begin, access.Check)",
							fset.Position(c.Pos()))
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked < 50 {
		t.Fatalf("only %d files checked", checked)
	}
}
