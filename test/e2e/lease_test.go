package e2e

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// TestLeaseTokens: a sandbox's lease token acts on it alone and dies with it.
func TestLeaseTokens(t *testing.T) {
	parallel(t)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	d := startDaemonWith(t, "--insecure-listen", addr)
	key, _ := os.ReadFile(d.dataDir + "/admin.key")
	admin, err := client.New("http://"+addr, strings.TrimSpace(string(key)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mine, err := admin.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := admin.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(mine.LeaseToken, "berth_lease_") {
		t.Fatalf("no lease token in the create response: %q", mine.LeaseToken)
	}
	lease, _ := client.New("http://"+addr, mine.LeaseToken)
	var out strings.Builder
	if exit, err := lease.Exec(ctx, mine.ID, api.ExecRequest{Cmd: []string{"echo", "leased"}}, &out, &out); err != nil || exit.Code != 0 || out.String() != "leased\n" {
		t.Fatalf("exec with the lease: %v %q", err, out.String())
	}
	if _, err := lease.Exec(ctx, other.ID, api.ExecRequest{Cmd: []string{"true"}}, &out, &out); err == nil {
		t.Fatal("a lease acted on another sandbox")
	}
	if _, err := lease.ListSandboxes(ctx, false); err == nil {
		t.Fatal("a lease listed all sandboxes")
	}
	forged, _ := client.New("http://"+addr, "berth_lease_"+other.ID+"_"+strings.Repeat("0", 40))
	if _, err := forged.GetSandbox(ctx, other.ID); err == nil {
		t.Fatal("a forged lease was accepted")
	}
	if _, err := admin.DeleteSandbox(ctx, mine.ID, true); err != nil {
		t.Fatal(err)
	}
	if _, err := lease.GetSandbox(ctx, mine.ID); err == nil {
		t.Fatal("the lease outlived its sandbox")
	}
}
