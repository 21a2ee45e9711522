package e2e

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/sqlite"
)

// wantStatus fails unless err is an API error of status (and, if code is
// not empty, that stable code).
func wantStatus(t *testing.T, what string, err error, status int, code string) *client.Error {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != status || code != "" && ce.Code != code {
		t.Fatalf("%s: %v, want %d %s", what, err, status, code)
	}
	return ce
}

// poolMembers reads the unclaimed members of tenant's pool of tpl from
// the daemon's database (no API lists them: they are no one's yet).
func poolMembers(t *testing.T, d *daemon, tenant, tpl string) []string {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(d.dataDir, "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sbs, _, err := st.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner}, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, sb := range sbs {
		if sb.Spec.Pool == tpl && sb.Tenant == tenant && sb.State == "paused" {
			out = append(out, sb.ID)
		}
	}
	return out
}

// TestTenantTemplates: two tenants over TCP with their own keys. Each
// uploads an archive template of the same name and sees its own; a's pool
// of its template holds a member that counts against a's quota, that b
// neither sees nor claims, and that a's create claims; a cannot remove
// the shared base, nor its own template while a sandbox uses it; host
// paths and (without --tenant-pulls) registry pulls are refused.
func TestTenantTemplates(t *testing.T) {
	parallel(t)
	addr := freeAddr(t)
	d := startDaemonWith(t, "--insecure-listen", addr)
	ctx := context.Background()
	scopes := []auth.Scope{auth.ScopeSandboxesRead, auth.ScopeSandboxesWrite, auth.ScopeTemplates, auth.ScopeExec}
	a, err := client.New("http://"+addr, tenantKey(t, d, "a", scopes...))
	if err != nil {
		t.Fatal(err)
	}
	b, err := client.New("http://"+addr, tenantKey(t, d, "b", scopes...))
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(t.TempDir(), "bb.tar")
	ref, _ := name.ParseReference("example.test/busybox:1")
	if err := tarball.WriteToFile(tarPath, ref, busyboxImage(t)); err != nil {
		t.Fatal(err)
	}
	upload := func(c *client.Client, tname string) *api.Template {
		t.Helper()
		f, err := os.Open(tarPath)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		tpl, err := c.UploadTemplateArchive(ctx, tname, f)
		if err != nil {
			t.Fatalf("upload %s: %v", tname, err)
		}
		return tpl
	}
	if tpl := upload(a, "tool"); tpl.Tenant != "a" {
		t.Fatalf("a's upload has tenant %q", tpl.Tenant)
	}
	if tpl := upload(b, "tool"); tpl.Tenant != "b" {
		t.Fatalf("b's upload has tenant %q", tpl.Tenant)
	}
	// The harness's cleanup empties the host's pools only: a's pool goes
	// with a's template, once a's sandboxes are gone.
	t.Cleanup(func() {
		for _, c := range []*client.Client{a, b} {
			if sbs, err := c.ListSandboxes(ctx, false); err == nil {
				for _, sb := range sbs {
					c.DeleteSandbox(ctx, sb.ID, true)
				}
			}
			c.DeleteTemplate(ctx, "tool")
		}
	})
	for c, tenant := range map[*client.Client]string{a: "a", b: "b"} {
		ts, err := c.ListTemplates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		owners := map[string]string{}
		for _, tt := range ts {
			if _, dup := owners[tt.Name]; dup {
				t.Fatalf("%s lists %s twice: %+v", tenant, tt.Name, ts)
			}
			owners[tt.Name] = tt.Tenant
		}
		if owners["tool"] != tenant || owners["base"] != "" {
			t.Fatalf("%s's templates: %+v, want its own tool and the shared base", tenant, owners)
		}
	}
	out, _, code := d.cli("template", "ls")
	if code != 0 || !strings.Contains(out, "OWNER") {
		t.Fatalf("template ls: %d %s", code, out)
	}

	// a's pool, under a quota of 2 sandboxes.
	if _, out, code := d.cli("quota", "set", "a", "--sandboxes", "2"); code != 0 {
		t.Fatalf("quota set: %d %s", code, out)
	}
	_, err = a.SetPool(ctx, "base", 1)
	wantStatus(t, "a pooling the shared base", err, http.StatusForbidden, "permission_denied")
	p, err := a.SetPool(ctx, "tool", 1)
	if err != nil || p.Tenant != "a" {
		t.Fatalf("a's pool: %+v %v", p, err)
	}
	var member string
	deadline := time.Now().Add(60 * time.Second)
	for member == "" && time.Now().Before(deadline) {
		if ms := poolMembers(t, d, "a", "tool"); len(ms) == 1 {
			member = ms[0]
		} else {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if member == "" {
		t.Fatal("a's pool made no ready member in 60s")
	}
	if ps, err := b.ListPools(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("b's pools: %+v %v, want none of a's", ps, err)
	}
	for c, who := range map[*client.Client]string{a: "a", b: "b"} {
		_, err := c.GetSandbox(ctx, member)
		wantStatus(t, who+" reading the unclaimed member", err, http.StatusNotFound, "not_found")
	}
	// b's create of its own tool is cold: never a's member.
	bs, err := b.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "tool"})
	if err != nil {
		t.Fatal(err)
	}
	if bs.ID == member {
		t.Fatal("b's create claimed a's pool member")
	}
	if _, err := b.DeleteSandbox(ctx, bs.ID, true); err != nil {
		t.Fatal(err)
	}
	// The member counts: a's one cold sandbox fills its quota of 2.
	cold, err := a.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "base"})
	if err != nil {
		t.Fatalf("a's first cold create: %v", err)
	}
	_, err = a.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "base"})
	wantStatus(t, "a's second cold create with its member counted", err, http.StatusTooManyRequests, "quota_exceeded")
	if _, err := a.DeleteSandbox(ctx, cold.ID, true); err != nil {
		t.Fatal(err)
	}
	own, err := a.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "tool", Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	if own.ID != member {
		t.Fatalf("a's create of tool = %s, want its pool member %s", own.ID, member)
	}
	var stdout strings.Builder
	if exit, err := a.Exec(ctx, own.ID, api.ExecRequest{Cmd: []string{"cat", "/data/hello"}}, &stdout, &stdout); err != nil || exit.Code != 0 || stdout.String() != "from-image\n" {
		t.Fatalf("exec in the claimed member: %v %q", err, stdout.String())
	}

	// Removal and imports.
	err = a.DeleteTemplate(ctx, "base")
	wantStatus(t, "a removing the shared base", err, http.StatusForbidden, "permission_denied")
	err = a.DeleteTemplate(ctx, "tool")
	wantStatus(t, "a removing its tool in use", err, http.StatusConflict, "")
	_, err = a.ImportTemplate(ctx, api.ImportTemplateRequest{Name: "pulled", Ref: "127.0.0.1:1/none:1"})
	if ce := wantStatus(t, "a's registry pull", err, http.StatusForbidden, "permission_denied"); !strings.Contains(ce.Message, "--tenant-pulls") {
		t.Errorf("the refusal does not name --tenant-pulls: %q", ce.Message)
	}
	_, err = a.ImportTemplate(ctx, api.ImportTemplateRequest{Name: "frompath", Path: tarPath})
	wantStatus(t, "a's host-path import", err, http.StatusForbidden, "permission_denied")

	// Cleanup through the API: a's template goes with its pool and its
	// refilled member; b's tool stays b's.
	if _, err := a.DeleteSandbox(ctx, own.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteTemplate(ctx, "tool"); err != nil {
		t.Fatalf("a removing its unused tool: %v", err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for len(poolMembers(t, d, "a", "tool")) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if ms := poolMembers(t, d, "a", "tool"); len(ms) != 0 {
		t.Fatalf("a's pool members outlived its template: %v", ms)
	}
	if ps, err := d.c.ListPools(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("pools after a's template went: %+v %v", ps, err)
	}
	if tpl, err := b.GetTemplate(ctx, "tool"); err != nil || tpl.Tenant != "b" {
		t.Fatalf("b's tool after a removed its own: %+v %v", tpl, err)
	}
}

// TestTenantBuildCache: a template file applied by one tenant builds its
// steps; the same file applied by another tenant builds them again (a
// cache hit across tenants would hand over a layer made in the other's
// sandbox), while a's second apply is all cached. Each applied template
// is its applier's, and a registry image is refused to a tenant without
// --tenant-pulls.
func TestTenantBuildCache(t *testing.T) {
	parallel(t)
	addr := freeAddr(t)
	d := startDaemonWith(t, "--insecure-listen", addr)
	ctx := context.Background()
	scopes := []auth.Scope{auth.ScopeSandboxesRead, auth.ScopeSandboxesWrite, auth.ScopeTemplates, auth.ScopeExec}
	a, _ := client.New("http://"+addr, tenantKey(t, d, "a", scopes...))
	b, _ := client.New("http://"+addr, tenantKey(t, d, "b", scopes...))
	t.Cleanup(func() { a.DeleteTemplate(ctx, "built"); b.DeleteTemplate(ctx, "built") })
	spec := "name: built\nfrom: base\nsteps:\n  - run: echo made-by-$(cat /proc/sys/kernel/random/uuid) > /made\n"
	apply := func(c *client.Client, who string) (*api.Template, string) {
		t.Helper()
		var out strings.Builder
		tpl, err := c.Apply(ctx, api.ApplyRequest{Spec: spec}, &out)
		if err != nil {
			t.Fatalf("%s's apply: %v\n%s", who, err, out.String())
		}
		return tpl, out.String()
	}
	ta, out := apply(a, "a")
	if ta.Tenant != "a" || strings.Contains(out, "(cached)") {
		t.Fatalf("a's first apply: tenant %q\n%s", ta.Tenant, out)
	}
	tb, out := apply(b, "b")
	if tb.Tenant != "b" || strings.Contains(out, "(cached)") {
		t.Fatalf("b's apply of the same file hit a's cache (tenant %q):\n%s", tb.Tenant, out)
	}
	if ta.Layers[len(ta.Layers)-1] == tb.Layers[len(tb.Layers)-1] {
		t.Fatalf("a and b share the built layer %s", ta.Layers[len(ta.Layers)-1])
	}
	if _, out := apply(a, "a"); !strings.Contains(out, "(cached)") || !strings.Contains(out, "up to date") {
		t.Fatalf("a's second apply was not from its own cache:\n%s", out)
	}
	// Each tenant's sandbox of "built" has its own file.
	read := func(c *client.Client) string {
		t.Helper()
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "built"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.DeleteSandbox(ctx, sb.ID, true)
		var o strings.Builder
		if exit, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"cat", "/made"}}, &o, &o); err != nil || exit.Code != 0 {
			t.Fatalf("cat /made: %v %q", err, o.String())
		}
		return o.String()
	}
	if ra, rb := read(a), read(b); ra == rb || !strings.HasPrefix(ra, "made-by-") {
		t.Fatalf("a's /made %q, b's %q: want each its own build", ra, rb)
	}
	// Apply answers in its build stream: the refusal is the stream's
	// error event, with its stable code (the status was sent before).
	_, err := a.Apply(ctx, api.ApplyRequest{Spec: "name: pulled\nimage: 127.0.0.1:1/none:1\n"}, nil)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != "permission_denied" || !strings.Contains(ce.Message, "--tenant-pulls") {
		t.Fatalf("a's apply of a registry image: %v, want permission_denied naming --tenant-pulls", err)
	}
	if _, err := a.GetTemplate(ctx, "pulled"); !client.IsNotFound(err) {
		t.Fatalf("the refused apply left a template: %v", err)
	}
}
