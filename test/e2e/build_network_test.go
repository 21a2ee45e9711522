package e2e

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/testenv/fakenet"
)

// The package host of the build tests: served over plain HTTP in the inet
// namespace of a netTopo, its name answered by a DNS server there (the
// daemon's resolver forwards to it: serve --egress-dns).
const (
	bnPkgHost   = "pkg.berth-build.test"
	bnOtherHost = "other.berth-build.test"
	bnPkgAddr   = "203.0.113.31"
	bnOtherAddr = "203.0.113.32"
	bnDNS       = "198.51.100.2:53"
)

// startPackageHosts serves files on port 80 of each name's address in
// topo's inet namespace and answers the names' A queries.
func startPackageHosts(t *testing.T, topo *netTopo, hosts map[string]string, files map[string]string) {
	t.Helper()
	for _, addr := range hosts {
		ipCmd(t, "-n", topo.inet, "addr", "add", addr+"/32", "dev", "lo")
	}
	var servers []*http.Server
	var dnsServers []*dns.Server
	inNetns(t, topo.inet, func() error {
		for name, addr := range hosts {
			ln, err := net.Listen("tcp", net.JoinHostPort(addr, "80"))
			if err != nil {
				return err
			}
			host := name
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, ok := files[strings.TrimPrefix(r.URL.Path, "/")]
				if !ok {
					http.NotFound(w, r)
					return
				}
				w.Write([]byte(body + " from " + host + "\n"))
			}), ReadHeaderTimeout: 5 * time.Second}
			servers = append(servers, srv)
			go srv.Serve(ln)
		}
		var err error
		dnsServers, err = fakenet.ServeDNSHere(bnDNS, hosts, false)
		return err
	})
	t.Cleanup(func() {
		for _, s := range servers {
			s.Close()
		}
		for _, s := range dnsServers {
			s.Shutdown()
		}
	})
}

// fetchStep is a build step that downloads url into /opt/pkg.txt (as a
// package manager would), failing the step when it cannot.
func fetchStep(url string) string {
	return `mkdir -p /opt && python3 -c 'import urllib.request; open("/opt/pkg.txt", "wb").write(urllib.request.urlopen("` + url + `", timeout=3).read())'`
}

// TestBuildNetworkPolicy: a build step with network egress reaches what
// its allow rules allow, under the egress policy: the fetch succeeds and
// its flows are in the template's build record; a step fetching from a
// name or an address no rule allows fails naming the denied flow; without
// --network a step has no network at all; apply's per-step network works
// the same and is part of the step's cache key.
func TestBuildNetworkPolicy(t *testing.T) {
	parallel(t)
	topo := newNetTopo(t)
	startPackageHosts(t, topo, map[string]string{bnPkgHost: bnPkgAddr, bnOtherHost: bnOtherAddr},
		map[string]string{"pkg.txt": "package-bytes"})
	d := newDaemon(t, &daemon{netns: topo.host, extra: []string{"--egress-dns", bnDNS}})

	// Allowed: the step fetches, and the template holds what it fetched.
	out, errOut, code := d.cli("template", "build", "fetched", "--from", "base", "--network", "egress",
		"--allow", bnPkgHost+":80", "--run", fetchStep("http://"+bnPkgHost+"/pkg.txt"))
	if code != 0 || strings.TrimSpace(out) != "fetched" {
		t.Fatalf("build with an allowed fetch: %d %q %q", code, out, errOut)
	}
	if o, e, c := d.cli("run", "--template", "fetched", "--", "cat", "/opt/pkg.txt"); c != 0 || o != "package-bytes from "+bnPkgHost+"\n" {
		t.Fatalf("fetched file in the template: %d %q %q", c, o, e)
	}
	// The step's flows are in the template's build record.
	o, e, c := d.cli("template", "inspect", "fetched", "-o", "json")
	if c != 0 {
		t.Fatalf("inspect: %q", e)
	}
	var tpl api.Template
	jsonDecode(t, o, &tpl)
	if tpl.Build == nil || len(tpl.Build.Steps) != 1 {
		t.Fatalf("no build record: %s", o)
	}
	st := tpl.Build.Steps[0]
	var dnsAllowed, connAllowed bool
	for _, f := range st.Flows {
		if f.Kind == "dns" && f.Name == bnPkgHost && f.Decision == "allow" {
			dnsAllowed = true
		}
		if f.Kind == "conn" && f.Dst == bnPkgAddr+":80" && f.Decision == "allow" {
			connAllowed = true
		}
	}
	if st.Network != "egress" || st.Sandbox == "" || !dnsAllowed || !connAllowed || st.FlowCount != len(st.Flows) {
		t.Fatalf("build record lacks the step's network or flows: %+v", st)
	}
	if o, _, _ := d.cli("template", "inspect", "fetched"); !strings.Contains(o, "allow:") || !strings.Contains(o, bnPkgAddr+":80") {
		t.Fatalf("inspect does not show the build's flows:\n%s", o)
	}
	// A list gives the counts, not the flows.
	ts, err := d.c.ListTemplates(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ts {
		if x.Name == "fetched" && (x.Build == nil || len(x.Build.Steps[0].Flows) != 0 || x.Build.Steps[0].FlowCount == 0) {
			t.Fatalf("listed build record: %+v", x.Build)
		}
	}

	// Denied by name: the error names the DNS query the policy refused.
	_, errOut, code = d.cli("template", "build", "denied-name", "--from", "base", "--network", "egress",
		"--allow", bnPkgHost+":80", "--run", fetchStep("http://"+bnOtherHost+"/pkg.txt"))
	if code == 0 || !strings.Contains(errOut, "denied dns "+bnOtherHost+" (notallowed)") {
		t.Fatalf("build with a denied name: %d %q", code, errOut)
	}
	// Denied by address: the error names the connection.
	_, errOut, code = d.cli("template", "build", "denied-addr", "--from", "base", "--network", "egress",
		"--allow", bnPkgHost+":80", "--run", fetchStep("http://"+bnOtherAddr+"/pkg.txt"))
	if code == 0 || !strings.Contains(errOut, "denied tcp "+bnOtherAddr+":80") {
		t.Fatalf("build with a denied address: %d %q", code, errOut)
	}
	for _, name := range []string{"denied-name", "denied-addr"} {
		if _, err := d.c.GetTemplate(t.Context(), name); err == nil {
			t.Fatalf("failed build %s left a template", name)
		}
	}
	// The default stays none: no resolver, no route.
	_, errOut, code = d.cli("template", "build", "offline", "--from", "base", "--run", fetchStep("http://"+bnPkgAddr+"/pkg.txt"))
	if code == 0 || strings.Contains(errOut, "network policy denied") {
		t.Fatalf("build without a network: %d %q", code, errOut)
	}
	// Bad network requests are refused before anything runs.
	for _, args := range [][]string{
		{"--allow", bnPkgHost},
		{"--network", "bridge"},
		{"--network", "egress", "--allow", "tcp://:bad:"},
	} {
		_, errOut, code = d.cli(append([]string{"template", "build", "bad", "--from", "base", "--run", "true"}, args...)...)
		if code == 0 || !strings.Contains(errOut, "invalid") && !strings.Contains(errOut, "allow") && !strings.Contains(errOut, "network") {
			t.Fatalf("bad network %v: %d %q", args, code, errOut)
		}
	}

	// apply: a run step with its own network, cached on a second apply.
	file := filepath.Join(t.TempDir(), "pkg.yaml")
	os.WriteFile(file, []byte(`name: applied
from: base
steps:
  - run: mkdir -p /opt
  - {run: '`+strings.ReplaceAll(fetchStep("http://"+bnPkgHost+"/pkg.txt"), "'", "''")+`', network: egress, allow: [`+bnPkgHost+`:80]}
`), 0o644)
	out, errOut, code = d.cli("apply", "-f", file)
	if code != 0 || strings.TrimSpace(out) != "applied" || !strings.Contains(errOut, "network egress") {
		t.Fatalf("apply with a network step: %d %q %q", code, out, errOut)
	}
	if o, e, c := d.cli("run", "--template", "applied", "--", "cat", "/opt/pkg.txt"); c != 0 || o != "package-bytes from "+bnPkgHost+"\n" {
		t.Fatalf("applied template: %d %q %q", c, o, e)
	}
	applied, err := d.c.GetTemplate(t.Context(), "applied")
	if err != nil || applied.Build == nil || len(applied.Build.Steps) != 2 || applied.Build.Steps[1].Network != "egress" ||
		len(applied.Build.Steps[1].Flows) == 0 {
		t.Fatalf("applied build record: %+v %v", applied, err)
	}
	_, errOut, code = d.cli("apply", "-f", file)
	if code != 0 || strings.Count(errOut, "(cached)") != 2 {
		t.Fatalf("second apply: %d %q", code, errOut)
	}
	// The cached apply keeps the record of the build that made the layers.
	again, err := d.c.GetTemplate(t.Context(), "applied")
	if err != nil || again.Build == nil || len(again.Build.Steps[1].Flows) == 0 {
		t.Fatalf("record after a cached apply: %+v %v", again, err)
	}
	// A denied step in apply names its flow too.
	os.WriteFile(file, []byte(`name: applied2
from: base
steps:
  - {run: '`+strings.ReplaceAll(fetchStep("http://"+bnOtherHost+"/pkg.txt"), "'", "''")+`', network: egress, allow: [`+bnPkgHost+`:80]}
`), 0o644)
	_, errOut, code = d.cli("apply", "-f", file)
	if code == 0 || !strings.Contains(errOut, "step 1") || !strings.Contains(errOut, "denied dns "+bnOtherHost) {
		t.Fatalf("apply with a denied step: %d %q", code, errOut)
	}
}
