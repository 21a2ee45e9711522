package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// TestTenantsAndKeysCLI drives tenants and keys through the CLI against
// a real daemon: the host (unix socket) makes tenants and their keys; a
// key is printed once and works over TCP; another tenant's key gets 404
// on the sandbox by id and by name; a minted lease dies with its
// sandbox's stop; a revoked key is refused on its next request.
func TestTenantsAndKeysCLI(t *testing.T) {
	parallel(t)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	d := startDaemonWith(t, "--insecure-listen", addr)
	ctx := context.Background()
	for _, name := range []string{"acme", "other"} {
		if out, errOut, code := d.cli("tenant", "create", name); code != 0 || strings.TrimSpace(out) != name {
			t.Fatalf("tenant create %s: %d %q %q", name, code, out, errOut)
		}
	}
	if out, _, code := d.cli("tenant", "ls"); code != 0 || !strings.Contains(out, "acme") || !strings.Contains(out, "other") {
		t.Fatalf("tenant ls: %d %q", code, out)
	}
	key := func(args ...string) string {
		t.Helper()
		out, errOut, code := d.cli(append([]string{"key", "create"}, args...)...)
		if code != 0 || !strings.HasPrefix(out, "berth_") {
			t.Fatalf("key create %v: %d %q %q", args, code, out, errOut)
		}
		return strings.TrimSpace(out)
	}
	acmeKey := key("--tenant", "acme", "--role", "member")
	otherKey := key("--tenant", "other", "--role", "admin")
	if _, _, code := d.cli("key", "create", "--tenant", "nope", "--role", "member"); code == 0 {
		t.Error("a key for a tenant that does not exist was made")
	}
	acme, _ := client.New("http://"+addr, acmeKey)
	other, _ := client.New("http://"+addr, otherKey)
	sb, err := acme.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{sb.ID, "web"} {
		_, err := other.GetSandbox(ctx, ref)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != http.StatusNotFound {
			t.Errorf("other tenant's key on %s: %v, want 404", ref, err)
		}
		if _, err := other.DeleteSandbox(ctx, ref, true); err == nil {
			t.Errorf("other tenant's key deleted %s", ref)
		}
	}
	if got, err := acme.GetSandbox(ctx, "web"); err != nil || got.State != "running" {
		t.Fatalf("acme's own sandbox: %v %+v", err, got)
	}
	l, err := acme.CreateLease(ctx, sb.ID, api.CreateLeaseRequest{Scopes: []string{"exec"}, TTLSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	leased, _ := client.New("http://"+addr, l.Token)
	var out strings.Builder
	if exit, err := leased.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"echo", "leased"}}, &out, &out); err != nil || exit.Code != 0 {
		t.Fatalf("exec with the minted lease: %v %q", err, out.String())
	}
	// One lease revoked by itself (berth lease --revoke): it ends, its
	// sibling does not.
	js, errOut, code := d.cli("lease", sb.ID, "--scope", "exec", "-o", "json")
	var l2 api.Lease
	if code != 0 || json.Unmarshal([]byte(js), &l2) != nil || l2.ID == "" {
		t.Fatalf("lease -o json: %d %q %q", code, js, errOut)
	}
	if out, errOut, code := d.cli("lease", sb.ID, "--revoke", l2.ID); code != 0 || strings.TrimSpace(out) != l2.ID {
		t.Fatalf("lease --revoke: %d %q %q", code, out, errOut)
	}
	revoked, _ := client.New("http://"+addr, l2.Token)
	var ce *client.Error
	if _, err := revoked.GetSandbox(ctx, sb.ID); !errors.As(err, &ce) || ce.Status != http.StatusUnauthorized {
		t.Errorf("the revoked lease: %v, want 401", err)
	}
	if _, err := leased.GetSandbox(ctx, sb.ID); err != nil {
		t.Errorf("revoking one lease ended its sibling: %v", err)
	}
	if _, err := acme.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := acme.Start(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := leased.GetSandbox(ctx, sb.ID); err == nil {
		t.Error("the minted lease outlived its sandbox's stop")
	}

	ls, _, code := d.cli("key", "ls")
	prefix := acmeKey[:len("berth_")+12]
	if code != 0 || !strings.Contains(ls, prefix) || strings.Contains(ls, acmeKey) {
		t.Fatalf("key ls: %d %q (want %s, never the key)", code, ls, prefix)
	}
	if out, errOut, code := d.cli("key", "revoke", prefix); code != 0 || strings.TrimSpace(out) != prefix {
		t.Fatalf("key revoke: %d %q %q", code, out, errOut)
	}
	_, err = acme.ListSandboxes(ctx, false)
	if !errors.As(err, &ce) || ce.Status != http.StatusUnauthorized {
		t.Errorf("a revoked key: %v, want 401", err)
	}
	if _, _, code := d.cli("tenant", "rm", "acme"); code == 0 {
		t.Error("a tenant owning a sandbox was removed")
	}
	if _, _, code := d.cli("rm", "-f", sb.ID); code != 0 {
		t.Fatal("rm")
	}
	if _, errOut, code := d.cli("tenant", "rm", "acme"); code != 0 {
		t.Fatalf("tenant rm: %q", errOut)
	}
}
