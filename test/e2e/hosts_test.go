package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// TestEtcHosts: every sandbox has an /etc/hosts naming localhost and its
// own hostname, also from an image that ships none, so both resolve; in
// an egress sandbox the hostname lookup never reaches DNS, so it is not
// in the flow log as a denied query.
func TestEtcHosts(t *testing.T) {
	parallel(t)
	topo := newNetTopo(t)
	d := startDaemonIn(t, topo.host)
	ctx := context.Background()

	// An image without /etc/hosts (busybox, passwd and group only).
	if _, err := d.c.ImportTemplate(ctx, api.ImportTemplateRequest{Name: "nohosts", Path: writeTestLayout(t, gnuTarUserImage(t))}); err != nil {
		t.Fatal(err)
	}
	bare, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "nohosts"})
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimSpace(execOut(t, d, bare.ID, "cat", "/proc/sys/kernel/hostname"))
	hosts := execOut(t, d, bare.ID, "cat", "/etc/hosts")
	if !strings.Contains(hosts, "127.0.0.1\tlocalhost\n") || !strings.Contains(hosts, "::1\tlocalhost") ||
		!strings.Contains(hosts, "\t"+name+"\t") {
		t.Errorf("/etc/hosts of an image without one (hostname %q):\n%s", name, hosts)
	}

	// Both names resolve, with the resolver of a real libc (python3 of
	// the base template), and in an egress sandbox the hostname is not a
	// DNS query.
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Network: "egress", Persistent: true, PersistRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	const resolve = "import socket; print(socket.gethostbyname('localhost'), socket.gethostbyname(socket.gethostname()))"
	if out := execOut(t, d, sb.ID, "python3", "-c", resolve); out != "127.0.0.1 127.0.1.1\n" {
		t.Errorf("resolving localhost and the hostname: %q", out)
	}
	// Lines a user adds survive a restart (a persisted root); berth's line is rewritten.
	execOut(t, d, sb.ID, "sh", "-c", "echo '10.1.2.3 mine' >> /etc/hosts")
	if _, err := d.c.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Start(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	after := execOut(t, d, sb.ID, "cat", "/etc/hosts")
	if !strings.Contains(after, "10.1.2.3 mine\n") || strings.Count(after, "# berth") != 1 {
		t.Errorf("/etc/hosts after stop/start:\n%s", after)
	}
	if out := execOut(t, d, sb.ID, "python3", "-c", resolve); out != "127.0.0.1 127.0.1.1\n" {
		t.Errorf("after stop/start: %q", out)
	}
	// A denied lookup is logged within a second or so; give it three,
	// then no flow may name the hostname.
	time.Sleep(3 * time.Second)
	flows, err := d.c.Flows(ctx, sb.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	sbName := strings.TrimSpace(execOut(t, d, sb.ID, "cat", "/proc/sys/kernel/hostname"))
	for _, f := range flows {
		if f.Decision == "deny" && (strings.Contains(f.Name, sbName) || f.Name == "localhost") {
			t.Errorf("the sandbox's own name went to DNS: %+v", f)
		}
	}
	for _, id := range []string{bare.ID, sb.ID} {
		if _, err := d.c.DeleteSandbox(ctx, id, true); err != nil {
			t.Fatal(err)
		}
	}
}
