package testenv

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/berth-sh/berth/internal/network"
)

// k8sLink is the name of a link a kubeenv test cluster makes: its pod
// bridge bk<6 hex> and its node-IP link bkn<6 hex>.
var k8sLink = regexp.MustCompile(`^bkn?[0-9a-f]{6}$`)

// sweepK8s adds what a kubeenv test cluster (internal/testenv/kubeenv,
// dirs berth-k8s-* under root) can leave outside its dir: its processes
// (etcd, kube-apiserver, containerd, its shims, kubelet, the
// kube-network-policies enforcer: each names the dir in its argv), its
// links, its nft tables (the guard berth-k8s-<hex>, the enforcer's
// berth-k8s-<hex>-np), kube-proxy's KUBE- chains, libcni's result cache
// files and kubelet's links in /var/log/containers. Its mounts, cgroup
// parent (/berth-k8s-<hex>) and dir are Sweep's usual checks.
func sweepK8s(root string, since time.Time, add func(kind, format string, args ...any)) {
	dir := []byte(filepath.Join(root, "berth-k8s-"))
	for _, p := range processes() {
		if bytes.Contains(p.cmdline, dir) {
			add("process", "%d %s", p.pid, strings.ReplaceAll(string(p.cmdline), "\x00", " "))
		}
	}
	if links, err := network.Dump(netlink.LinkList); err == nil {
		for _, l := range links {
			if k8sLink.MatchString(l.Attrs().Name) {
				add("network", "link %s", l.Attrs().Name)
			}
		}
	}
	if conn, err := nftables.New(); err == nil {
		if tables, err := conn.ListTablesOfFamily(nftables.TableFamilyINet); err == nil {
			for _, t := range tables {
				if strings.HasPrefix(t.Name, "berth-k8s-") {
					add("network", "nft table inet %s", t.Name)
				}
			}
		}
	}
	// kube-proxy's chains (Options.ServiceProxy) have fixed names in the
	// host's own tables: left over only if no kube-proxy runs (a host that
	// is a real Kubernetes node keeps its own).
	if !kubeProxyRuns() {
		if chains, err := KubeChains(); err == nil {
			for _, ch := range chains {
				add("network", "iptables chain %s, and no kube-proxy runs", ch)
			}
		}
	}
	// The cache and the log links are host-wide, named by the cluster and
	// not by its dir: one older than the stamp is another run's.
	newer := func(path string) bool {
		info, err := os.Lstat(path)
		return err == nil && info.ModTime().After(since)
	}
	cached, _ := filepath.Glob(filepath.Join(cniResults, "berth-k8s-*"))
	for _, f := range cached {
		if newer(f) {
			add("file", "%s", f)
		}
	}
	logs, _ := filepath.Glob(filepath.Join(containerLogs, "*"))
	for _, l := range logs {
		if dst, err := os.Readlink(l); err == nil && strings.HasPrefix(dst, string(dir)) && newer(l) {
			add("file", "%s -> %s", l, dst)
		}
	}
}

// Where libcni caches results and kubelet links container logs (a test
// points them at its own dirs).
var (
	cniResults    = "/var/lib/cni/results"
	containerLogs = "/var/log/containers"
)

// kubeProxyRuns reports whether any kube-proxy process runs here.
func kubeProxyRuns() bool {
	for _, p := range processes() {
		argv0, _, _ := bytes.Cut(p.cmdline, []byte{0})
		if filepath.Base(string(argv0)) == "kube-proxy" {
			return true
		}
	}
	return false
}

// KubeChains lists the chains named KUBE-... in the host's IPv4 and IPv6
// tables (iptables-nft's), as "<family>/<table>/<chain>": kube-proxy's,
// and the KUBE-FIREWALL it shares with kubelet.
func KubeChains() ([]string, error) {
	conn, err := nftables.New()
	if err != nil {
		return nil, err
	}
	chains, err := conn.ListChains()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ch := range chains {
		f := ch.Table.Family
		if (f == nftables.TableFamilyIPv4 || f == nftables.TableFamilyIPv6) && strings.HasPrefix(ch.Name, "KUBE-") {
			fam := "ip"
			if f == nftables.TableFamilyIPv6 {
				fam = "ip6"
			}
			out = append(out, fam+"/"+ch.Table.Name+"/"+ch.Name)
		}
	}
	return out, nil
}
