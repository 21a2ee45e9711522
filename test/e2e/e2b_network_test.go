package e2e

import (
	"net"
	"os"
	"strings"
	"testing"
)

// TestE2BNetworkRules (#33): E2B's egress rules through the door, driven
// by the unmodified e2b SDK (test/e2b/network.mjs) in a test-made network
// (the "internet" a namespace with two addresses): a create's denyOut of
// one address blocks it and no other; denying all traffic leaves only
// allowOut; updateNetwork replaces a running sandbox's rules at once
// (berth's live rule update), an empty one opens it again; a sandbox
// without egress (allowInternetAccess false) cannot be updated, and a
// denyOut that is not an address or CIDR is refused without changing the
// rules.
func TestE2BNetworkRules(t *testing.T) {
	parallel(t)
	topo := newNetTopo(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a free port number for the namespace's loopback
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	d := newDaemon(t, &daemon{netns: topo.host, extra: []string{"--e2b-listen", addr}})
	key, err := os.ReadFile(d.dataDir + "/admin.key")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		OK                               bool
		Failure                          string
		DenyA, UpdatedDenyB, UpdatedOpen string
		UpdatedOnlyA, OnlyB, AfterBad    string
		NoneUpdate, BadDeny              string
	}
	const a, b = "198.51.100.2", "203.0.113.10"
	runNode(t, []string{"nsenter", "--net=/run/netns/" + topo.host},
		[]string{"E2B_API_URL=http://" + addr, "E2B_SANDBOX_URL=http://" + addr, "E2B_API_KEY=" + strings.TrimSpace(string(key)),
			"BERTH_TEST_A=" + a, "BERTH_TEST_B=" + b},
		&got, "network.mjs")
	t.Logf("the SDK saw: %+v", got)
	if !got.OK {
		t.Fatalf("the SDK script failed: %s", got.Failure)
	}
	for what, c := range map[string][2]string{
		"denyOut [A]":                     {got.DenyA, "no,yes"},
		"updated to denyOut [B]":          {got.UpdatedDenyB, "yes,no"},
		"updated to nothing":              {got.UpdatedOpen, "yes,yes"},
		"updated to all denied but A":     {got.UpdatedOnlyA, "yes,no"},
		"created with all denied but B":   {got.OnlyB, "no,yes"},
		"after a refused update (A only)": {got.AfterBad, "yes,no"},
	} {
		if c[0] != c[1] {
			t.Errorf("%s: A,B reached %s, want %s", what, c[0], c[1])
		}
	}
	if !strings.Contains(got.NoneUpdate, "400") && !strings.Contains(got.NoneUpdate, "egress") {
		t.Errorf("updating a sandbox without egress: %s", got.NoneUpdate)
	}
	if !strings.Contains(got.BadDeny, "want an IP address or a CIDR") {
		t.Errorf("a denyOut of a name: %s", got.BadDeny)
	}
}
