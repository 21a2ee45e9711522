package kubeenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/testenv"
)

// kube-proxy for the node (Options.ServiceProxy): the real one, in iptables
// mode, so a pod's packet to a ClusterIP is translated to an endpoint as
// on any cluster, without its source address changed (pods are inside
// clusterCIDR: kube-proxy masquerades only what comes from outside).
//
// Its chains have fixed names (KUBE-SERVICES, KUBE-POSTROUTING, ...) in the
// host's own tables, so unlike the rest of a cluster it cannot be scoped
// to one: a host-wide lock lets one cluster at a time run it, and the
// cleanup (kube-proxy --cleanup) is checked to leave no KUBE- chain
// behind. It is configured to change nothing else of the host: no
// conntrack sysctls, no route_localnet (localhostNodePorts off), node
// ports only on the node's own address, health and metrics on loopback.

// serviceProxyLock is the host-wide lock of the one kube-proxy.
const serviceProxyLock = "/run/lock/berth-kube-proxy.lock"

func (c *Cluster) startServiceProxy(t testing.TB) {
	t.Helper()
	for _, b := range []string{"iptables", "iptables-save", "iptables-restore"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("kubeenv: kube-proxy needs %s (Debian's iptables, a dependency of containerd): run scripts/install-deps.sh", b)
		}
	}
	unlock := lockHost(t, serviceProxyLock, 10*time.Minute)
	// iptables-nft makes the tables it writes (filter, nat, mangle of ip
	// and ip6); those that were not there before go again once empty.
	before, err := iptablesTables()
	if err != nil {
		unlock()
		t.Fatalf("kubeenv: listing the host's nft tables: %v", err)
	}
	ports, err := freePorts(2)
	must(t, err)
	kc := c.componentKubeconfig(t, "kube-proxy", "system:kube-proxy", "system:masters")
	cfg := filepath.Join(c.Dir, "kube-proxy.yaml")
	q := strconv.Quote
	must(t, os.WriteFile(cfg, []byte(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: `+q(kc)+`
hostnameOverride: `+q(c.NodeName)+`
mode: iptables
clusterCIDR: `+q(c.node.subnet.String())+`
detectLocalMode: ClusterCIDR
healthzBindAddress: `+q("127.0.0.1:"+strconv.Itoa(ports[0]))+`
metricsBindAddress: `+q("127.0.0.1:"+strconv.Itoa(ports[1]))+`
nodePortAddresses: [`+q(c.node.nodeIP.String()+"/32")+`]
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
  masqueradeAll: false
`), 0o600))
	p, err := start(filepath.Join(c.Dir, "logs"), "kube-proxy", c.Bins.KubeProxy, "--config="+cfg, "--v=2")
	if err != nil {
		unlock()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- kube-proxy log (last 30 lines) ---\n%s", p.tail(30))
		}
		p.stop(10 * time.Second)
		defer unlock()
		out, err := exec.Command(c.Bins.KubeProxy, "--cleanup", "--v=1").CombinedOutput()
		if err != nil {
			t.Errorf("kubeenv: kube-proxy --cleanup: %v\n%s", err, out)
		}
		if err := removeFirewallChain(); err != nil {
			t.Errorf("kubeenv: %v", err)
		}
		if err := removeNewEmptyTables(before); err != nil {
			t.Errorf("kubeenv: %v", err)
		}
		if left, err := testenv.KubeChains(); err != nil {
			t.Errorf("kubeenv: listing the host's chains after kube-proxy's cleanup: %v", err)
		} else if len(left) > 0 {
			t.Errorf("kubeenv: kube-proxy's chains left after its cleanup: %s", strings.Join(left, ", "))
		}
	})
	if err := waitFor(60*time.Second, "kube-proxy's KUBE-SERVICES chain", func() (bool, error) {
		out, err := exec.Command("iptables-save", "-t", "nat").Output()
		return err == nil && strings.Contains(string(out), ":KUBE-SERVICES "), err
	}, p); err != nil {
		fatalf(t, []*proc{p}, "kubeenv: kube-proxy: %v", err)
	}
}

// WaitServiceRouted waits until kube-proxy translates Service ns/name:
// a DNAT rule to one of its endpoints is in the host's nat table.
func (c *Cluster) WaitServiceRouted(t testing.TB, ns, name string, within time.Duration) {
	t.Helper()
	if !c.opts.ServiceProxy {
		t.Fatal("kubeenv: no kube-proxy runs (Options.ServiceProxy)")
	}
	tag := `"` + ns + "/" + name
	err := waitFor(within, "kube-proxy's rules of Service "+ns+"/"+name, func() (bool, error) {
		out, err := exec.Command("iptables-save", "-t", "nat").Output()
		if err != nil {
			return false, err
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, tag) && strings.Contains(l, "-j DNAT") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// removeFirewallChain removes KUBE-FIREWALL from the host's filter tables
// (IPv4 and IPv6), which kube-proxy --cleanup leaves: it is a copy of
// kubelet's own (proxier.go: kubeletFirewallChain), which this cluster's
// kubelet does not make, so here it is kube-proxy's alone.
func removeFirewallChain() error {
	for _, ipt := range []string{"iptables", "ip6tables"} {
		if exec.Command(ipt, "-w", "-n", "-L", "KUBE-FIREWALL").Run() != nil {
			continue // not there
		}
		for _, from := range []string{"INPUT", "OUTPUT", "FORWARD"} {
			for range 8 { // each jump to it, however many were added
				if exec.Command(ipt, "-w", "-D", from, "-j", "KUBE-FIREWALL").Run() != nil {
					break
				}
			}
		}
		for _, op := range []string{"-F", "-X"} {
			if out, err := exec.Command(ipt, "-w", op, "KUBE-FIREWALL").CombinedOutput(); err != nil {
				return fmt.Errorf("%s %s KUBE-FIREWALL: %v: %s", ipt, op, err, strings.TrimSpace(string(out)))
			}
		}
	}
	return nil
}

// iptablesTables lists the host's nft tables iptables-nft and
// ip6tables-nft use (family ip or ip6), as "family/name".
func iptablesTables() (map[string]bool, error) {
	conn, err := nftables.New()
	if err != nil {
		return nil, err
	}
	tables, err := conn.ListTables()
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, tb := range tables {
		if tb.Family == nftables.TableFamilyIPv4 || tb.Family == nftables.TableFamilyIPv6 {
			out[fmt.Sprintf("%d/%s", tb.Family, tb.Name)] = true
		}
	}
	return out, nil
}

// removeNewEmptyTables deletes the ip and ip6 tables not in before whose
// chains hold no rule (iptables-nft's tables after kube-proxy's cleanup).
// A table with a rule in it is someone's: it stays.
func removeNewEmptyTables(before map[string]bool) error {
	conn, err := nftables.New()
	if err != nil {
		return err
	}
	tables, err := conn.ListTables()
	if err != nil {
		return err
	}
	for _, tb := range tables {
		if tb.Family != nftables.TableFamilyIPv4 && tb.Family != nftables.TableFamilyIPv6 || before[fmt.Sprintf("%d/%s", tb.Family, tb.Name)] {
			continue
		}
		chains, err := conn.ListChainsOfTableFamily(tb.Family)
		if err != nil {
			return err
		}
		empty := true
		for _, ch := range chains {
			if ch.Table.Name != tb.Name {
				continue
			}
			rules, err := conn.GetRules(tb, ch)
			if err != nil {
				return err
			}
			empty = empty && len(rules) == 0
		}
		if empty {
			conn.DelTable(tb)
		}
	}
	return conn.Flush()
}

// lockHost takes the host-wide lock at path (flock), waiting up to
// within, and returns its release.
func lockHost(t testing.TB, path string, within time.Duration) func() {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	must(t, err)
	deadline := time.Now().Add(within)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }
		}
		if err != unix.EWOULDBLOCK || time.Now().After(deadline) {
			f.Close()
			t.Fatalf("kubeenv: lock %s (another cluster runs kube-proxy): %v", path, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
