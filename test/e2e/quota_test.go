package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/sqlite"
)

// tenantKey adds an API key of tenant to the daemon's store (a second
// handle on its SQLite file) and returns the key.
func tenantKey(t *testing.T, d *daemon, tenant string, scopes ...auth.Scope) string {
	t.Helper()
	key, _ := tenantKeyID(t, d, tenant, scopes...)
	return key
}

// tenantKeyID is tenantKey that also returns the key's id.
func tenantKeyID(t *testing.T, d *daemon, tenant string, scopes ...auth.Scope) (key, id string) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(d.dataDir, "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// The tenant's record first: quotas and other tenant routes name only
	// tenants that exist. A second key of the same tenant finds it there.
	if err := st.CreateTenant(ctx, &store.Tenant{Name: tenant, CreatedAt: time.Now().UTC()}); err != nil &&
		!errors.Is(err, errdefs.ErrConflict) {
		t.Fatal(err)
	}
	id, key = auth.NewKey()
	var sc []string
	for _, s := range scopes {
		sc = append(sc, string(s))
	}
	if err := st.CreateAPIKey(ctx, &store.APIKey{ID: id, Name: tenant + "-test", Tenant: tenant, Hash: auth.Hash(key),
		Scopes: sc, CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	return key, id
}

// TestQuotaLimits: a tenant's quota over the real daemon. Limit 3, 8
// concurrent creates over TCP with the tenant's key: exactly 3 succeed and
// 5 get 429 quota_exceeded with Retry-After and the limit in the message;
// nothing of the refused ones is left (doctor is clean, the leak check at
// the end finds no cgroup or mount). The quota routes are the host
// admin's: the tenant's own key cannot raise its quota. The per-key rate
// limit answers 429 rate_limited with a Retry-After after which the same
// request passes.
func TestQuotaLimits(t *testing.T) {
	parallel(t)
	addr := freeAddr(t)
	d := startDaemonWith(t, "--insecure-listen", addr)
	key := tenantKey(t, d, "acme", auth.ScopeSandboxesRead, auth.ScopeSandboxesWrite)
	ctx := context.Background()
	if _, out, code := d.cli("quota", "set", "acme", "--sandboxes", "3"); code != 0 {
		t.Fatalf("berth quota set: %d %s", code, out)
	}
	tc, err := client.New("http://"+addr, key)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	// The host admin on the unix socket sees its own tenant's sandboxes
	// only, so the tenant removes its own before the harness's cleanup
	// (registered earlier, so it runs later) checks for leaks.
	t.Cleanup(func() {
		if _, out, code := d.cli("quota", "set", "acme", "--key-rate", "0", "--sandboxes", "0"); code != 0 {
			t.Errorf("lifting the quota: %s", out)
		}
		sbs, err := tc.ListSandboxes(ctx, false)
		if err != nil {
			t.Errorf("listing the tenant's sandboxes: %v", err)
		}
		for _, sb := range sbs {
			if _, err := tc.DeleteSandbox(ctx, sb.ID, true); err != nil {
				t.Errorf("deleting %s: %v", sb.ID, err)
			}
		}
	})
	// The tenant cannot touch quotas (host admin only).
	if _, err := tc.SetQuota(ctx, "acme", api.QuotaRequest{MaxSandboxes: 100}); !client.IsUnauthorized(err) {
		t.Fatalf("a tenant key set its own quota: %v", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = tc.CreateSandbox(ctx, api.CreateSandboxRequest{})
		}()
	}
	wg.Wait()
	ok, refused := 0, 0
	for _, err := range errs {
		var ce *client.Error
		switch {
		case err == nil:
			ok++
		case errors.As(err, &ce) && ce.Status == 429 && ce.Code == "quota_exceeded":
			refused++
			if ce.RetryAfter <= 0 || !strings.Contains(ce.Message, "tenant acme: 3 of 3 concurrent sandboxes in use") {
				t.Errorf("refusal: Retry-After %v, message %q", ce.RetryAfter, ce.Message)
			}
		default:
			t.Errorf("unexpected: %v", err)
		}
	}
	if ok != 3 || refused != 5 {
		t.Fatalf("%d created, %d refused; want 3 and 5", ok, refused)
	}
	all, err := tc.ListSandboxes(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 {
		t.Fatalf("%d records (tombstones included) after the race, want 3", len(all))
	}
	assertDoctorClean(t, d)
	out, _, code := d.cli("quota", "get", "acme")
	if code != 0 || !regexp.MustCompile(`sandboxes\s+3\s+3\n`).MatchString(out) {
		t.Fatalf("berth quota get: %d\n%s", code, out)
	}
	// The tenant reads its own quota and usage (GET /v1/quota), and no
	// other tenant's: the tenant is the key's, whatever the request says.
	own, err := tc.GetOwnQuota(ctx)
	if err != nil || own.Tenant != "acme" || own.MaxSandboxes != 3 || own.Usage == nil || own.Usage.Sandboxes != 3 {
		t.Fatalf("GET /v1/quota with acme's key: %+v %v", own, err)
	}
	if _, err := tc.GetQuota(ctx, "globex"); !client.IsUnauthorized(err) {
		t.Fatalf("acme's key read another tenant's quota: %v", err)
	}
	cmd := exec.Command(berthBin, "quota", "get", "-o", "json")
	cmd.Env = append(os.Environ(), "BERTH_HOST=http://"+addr, "BERTH_API_KEY="+key)
	if o, err := cmd.Output(); err != nil || !strings.Contains(string(o), `"tenant": "acme"`) {
		t.Fatalf("berth quota get (no name) with acme's key: %v %s", err, o)
	}
	if out, _, code := d.cli("quota", "get"); code != 0 || !strings.Contains(out, "(the default tenant)") {
		t.Fatalf("berth quota get (no name) as the host admin: %d %s", code, out)
	}

	// Per-key rate: 2 a second, burst 2.
	if _, out, code := d.cli("quota", "set", "acme", "--key-rate", "2/s,2"); code != 0 {
		t.Fatalf("berth quota set --key-rate: %d %s", code, out)
	}
	var rl *client.Error
	for i := 0; i < 5; i++ {
		if _, err := tc.ListSandboxes(ctx, false); err != nil {
			if !errors.As(err, &rl) || rl.Status != 429 || rl.Code != "rate_limited" {
				t.Fatalf("request %d: %v", i, err)
			}
			if i < 2 {
				t.Fatalf("limited at request %d, within the burst", i)
			}
			break
		}
	}
	if rl == nil {
		t.Fatal("5 requests at once within a 2/s,2 limit all passed")
	}
	if rl.RetryAfter <= 0 || rl.RetryAfter > 2*time.Second {
		t.Fatalf("Retry-After %v", rl.RetryAfter)
	}
	time.Sleep(rl.RetryAfter)
	if _, err := tc.ListSandboxes(ctx, false); err != nil {
		t.Fatalf("after Retry-After %v: %v", rl.RetryAfter, err)
	}
	// The unix socket's admin is not limited by the tenant's key rate.
	for i := 0; i < 5; i++ {
		if _, err := d.c.ListSandboxes(ctx, false); err != nil {
			t.Fatal(err)
		}
	}
}
