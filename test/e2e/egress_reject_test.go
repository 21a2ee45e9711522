package e2e

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// TestDeniedEgressFailsFast: a connect the egress policy denies is
// answered at once (a TCP reset, or ICMP administratively prohibited)
// rather than dropped, so the sandbox's client sees "connection refused"
// or "unreachable" instead of hanging until its own timeout; the attempt
// is still in the flow log as denied.
func TestDeniedEgressFailsFast(t *testing.T) {
	parallel(t)
	topo := newNetTopo(t)
	d := startDaemonIn(t, topo.host)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Network: "egress",
		Allow: []string{"tcp://198.51.100.2:8080"}})
	if err != nil {
		t.Fatal(err)
	}
	// The client's own timeout is generous (60 s): a dropped SYN would
	// end in "timeout", which is the failure this test is about; no
	// wall-clock assertion is made beyond that.
	const probe = `
import socket, errno, sys
for host, port in [(sys.argv[1], 8080), (sys.argv[2], 8080), (sys.argv[3], 9)]:
    try:
        socket.create_connection((host, port), timeout=60).close()
        print(host, "connected")
    except socket.timeout:
        print(host, "timeout")
    except ConnectionRefusedError:
        print(host, "refused")
    except OSError as e:
        print(host, "unreachable" if e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EACCES, errno.EPERM) else "other-" + errno.errorcode.get(e.errno, str(e.errno)))
`
	// 203.0.113.10: no rule (deny_norule); 169.254.169.254: protected;
	// 198.51.100.1: the daemon's host itself (input chain).
	out := execOut(t, d, sb.ID, "python3", "-c", probe, "203.0.113.10", "169.254.169.254", "198.51.100.1")
	for _, host := range []string{"203.0.113.10", "169.254.169.254", "198.51.100.1"} {
		var got string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == host {
				got = f[1]
			}
		}
		if got != "refused" && got != "unreachable" {
			t.Errorf("denied connect to %s: %q, want refused or unreachable (output %q)", host, got, out)
		}
	}
	// Still logged as denied.
	deadline := time.Now().Add(10 * time.Second)
	for {
		flows, err := d.c.Flows(ctx, sb.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		denied := map[string]bool{}
		for _, f := range flows {
			if f.Decision == "deny" {
				host, _, _ := net.SplitHostPort(f.Dst)
				denied[host] = true
			}
		}
		if denied["203.0.113.10"] && denied["169.254.169.254"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("flow log lacks the denied attempts: %+v", flows)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
}
