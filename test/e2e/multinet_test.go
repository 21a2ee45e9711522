package e2e

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/berth-sh/berth/api"
)

// TestTwoDaemonsEgress: two daemons on one host both run egress sandboxes
// (the second finds the default subnet taken by the first's bridge and
// takes another), and once both have stopped cleanly nothing of their
// networks is left: no bridge, no veth, no nft table.
func TestTwoDaemonsEgress(t *testing.T) {
	parallel(t)
	topo := newNetTopo(t)
	t.Cleanup(func() {
		out, err := exec.Command("ip", "-n", topo.host, "-o", "link").CombinedOutput()
		if err != nil {
			t.Errorf("ip link: %v: %s", err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Fields(line); len(f) > 1 && !strings.HasPrefix(f[1], "lo:") && !strings.HasPrefix(f[1], "bth") {
				t.Errorf("link left after both daemons stopped: %s", line)
			}
		}
		ns, err := os.Open("/var/run/netns/" + topo.host)
		if err != nil {
			t.Fatal(err)
		}
		defer ns.Close()
		c, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
		if err != nil {
			t.Fatal(err)
		}
		tables, err := c.ListTables()
		if err != nil {
			t.Fatalf("listing nft tables: %v", err)
		}
		for _, tb := range tables {
			t.Errorf("nft table %s left after both daemons stopped", tb.Name)
		}
	})
	ctx := context.Background()
	var subnets []netip.Prefix
	for i, d := range []*daemon{startDaemonIn(t, topo.host), startDaemonIn(t, topo.host)} {
		sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Network: "egress", Allow: []string{"tcp://198.51.100.2:8080"}})
		if err != nil {
			t.Fatalf("daemon %d: egress create: %v", i+1, err)
		}
		a, err := netip.ParseAddr(sb.IPv4)
		if err != nil {
			t.Fatalf("daemon %d: address %q", i+1, sb.IPv4)
		}
		subnets = append(subnets, netip.PrefixFrom(a, 16).Masked())
		var out strings.Builder
		ok := false
		for range 30 { // the test server may be starting
			out.Reset()
			ex, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"python3", "-c",
				"import urllib.request; print(urllib.request.urlopen('http://198.51.100.2:8080/index.html', timeout=3).read().decode(), end='')"}}, &out, &out)
			if err == nil && ex.Code == 0 {
				ok = true
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !ok || out.String() != "hello-from-the-test-internet\n" {
			t.Fatalf("daemon %d: egress sandbox did not reach the test host: %q", i+1, out.String())
		}
	}
	if subnets[0] == subnets[1] {
		t.Fatalf("both daemons use %s", subnets[0])
	}
}
