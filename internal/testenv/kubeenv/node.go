package kubeenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-sh/berth/internal/network"
	"github.com/berth-sh/berth/internal/network/nftexpr"
	"github.com/berth-sh/berth/internal/overlay"
	"github.com/berth-sh/berth/internal/testenv"
)

// CNIBinDir is where Debian's containernetworking-plugins put the plugins.
const CNIBinDir = "/usr/lib/cni"

// node is the cluster's one real node.
type node struct {
	dir     string // <cluster>/node
	sock    string // containerd's socket
	cgroup  string // the pods' cgroup parent, /berth-k8s-<id>
	bridge  string // bk<id>
	link    string // bkn<id>, an empty bridge holding the node's IP
	nodeIP  netip.Addr
	netName string // the CNI network's name, berth-k8s-<id>
	subnet  netip.Prefix
	nft     string // the guard's nft table (inet), berth-k8s-<id>
	// serviceRoute: pods get a route to ServiceCIDR through the bridge
	// (Options.ServiceProxy), which kube-proxy translates on the host;
	// anything it does not translate the guard drops.
	serviceRoute bool

	containerd, kubelet *proc
	// madeDevicePluginDir: /var/lib/kubelet did not exist before kubelet
	// made its fixed device-plugin dir there.
	madeDevicePluginDir bool
}

// devicePluginDir is where every kubelet puts its device-plugin socket,
// whatever its root dir (k8s.io/kubelet's DevicePluginPath).
const devicePluginDir = "/var/lib/kubelet/device-plugins"

// cleanDevicePluginDir removes kubelet's device-plugin socket once no
// kubelet runs, and the dirs if this node made them.
func (n *node) cleanDevicePluginDir() {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && filepath.Base(exe) == "kubelet" {
			return // another cluster's kubelet serves it now
		}
	}
	os.Remove(filepath.Join(devicePluginDir, "kubelet.sock"))
	if n.madeDevicePluginDir {
		os.Remove(devicePluginDir)
		os.Remove(filepath.Dir(devicePluginDir))
	}
}

// PodSubnet is the node's pod CIDR (a /24 of 10.244.0.0/16 that no
// address or route of the host overlaps).
func (c *Cluster) PodSubnet() netip.Prefix {
	if c.node == nil {
		return netip.Prefix{}
	}
	return c.node.subnet
}

// ContainerdSocket is the node's containerd socket ("" without a node).
func (c *Cluster) ContainerdSocket() string {
	if c.node == nil {
		return ""
	}
	return c.node.sock
}

func (c *Cluster) startNode(t testing.TB) {
	t.Helper()
	for _, b := range []string{"containerd", "ctr", "runc"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("kubeenv: the node needs %s (Debian's containerd and runc): run scripts/install-deps.sh", b)
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(CNIBinDir, p)); err != nil {
			t.Fatalf("kubeenv: the node needs the CNI %s plugin in %s (containernetworking-plugins): run scripts/install-deps.sh", p, CNIBinDir)
		}
	}
	n := &node{
		dir:     filepath.Join(c.Dir, "node"),
		cgroup:  "/berth-k8s-" + c.ID,
		bridge:  "bk" + c.ID,
		link:    "bkn" + c.ID,
		netName: "berth-k8s-" + c.ID,
		nft:     "berth-k8s-" + c.ID,

		serviceRoute: c.opts.ServiceProxy,
	}
	n.sock = filepath.Join(n.dir, "containerd.sock")
	c.node = n
	c.NodeName = "k8s-node-" + c.ID
	for _, d := range []string{"containerd/root", "containerd/state", "runc", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "pki"} {
		must(t, os.MkdirAll(filepath.Join(n.dir, d), 0o700))
	}
	var err error
	if n.subnet, err = freeSubnet(244); err != nil {
		t.Fatal(err)
	}
	if err := n.addNodeIP(); err != nil {
		t.Fatal(err)
	}
	must(t, n.writeCNI())
	if err := n.guard(); err != nil {
		t.Fatalf("kubeenv: nft guard for the pod bridge: %v", err)
	}
	must(t, n.writeContainerdConfig(c.runsc))
	var env []string
	if c.runsc.Dir != "" {
		// containerd finds a runtime's shim (containerd-shim-runsc-v1)
		// on its PATH.
		env = []string{"PATH=" + c.runsc.Dir + ":" + os.Getenv("PATH")}
	}
	n.containerd, err = startEnv(filepath.Join(c.Dir, "logs"), "containerd", "containerd", env, "--config", filepath.Join(n.dir, "containerd", "config.toml"))
	must(t, err)
	if err := waitFor(30*time.Second, "containerd", func() (bool, error) {
		_, err := n.ctr("version")
		return err == nil, err
	}, n.containerd); err != nil {
		fatalf(t, []*proc{n.containerd}, "kubeenv: %v", err)
	}
	if err := n.importImage(PauseImage, pauseImage(t)); err != nil {
		t.Fatal(err)
	}

	// kubelet: a client cert as system:node:<name> (the Node authorizer
	// and NodeRestriction then hold it to its own node), a serving cert for
	// its node IP, and the apiserver's kubelet-client cert as the only one it
	// accepts (x509 authentication; AlwaysAllow beyond it).
	pki := filepath.Join(n.dir, "pki")
	client, err := c.ca.issue("system:node:"+c.NodeName, []string{"system:nodes"}, false)
	must(t, err)
	kubeconfigPath := filepath.Join(n.dir, "kubelet.kubeconfig")
	must(t, kubeconfig(kubeconfigPath, c.Server, c.ca.pem, "kubelet", client))
	serving, err := c.ca.issue(c.NodeName, nil, true, c.NodeName, n.nodeIP.String())
	must(t, err)
	srvCrt, srvKey, err := serving.write(pki, "kubelet")
	must(t, err)
	caPath := filepath.Join(pki, "ca.crt")
	must(t, os.WriteFile(caPath, c.ca.pem, 0o644))
	ports, err := freePorts(1)
	must(t, err)
	cfgPath := filepath.Join(n.dir, "kubelet.yaml")
	must(t, os.WriteFile(cfgPath, []byte(n.kubeletConfig(ports[0], caPath, srvCrt, srvKey)), 0o644))
	if _, err := os.Stat(filepath.Dir(devicePluginDir)); os.IsNotExist(err) {
		n.madeDevicePluginDir = true
	}
	n.kubelet, err = start(filepath.Join(c.Dir, "logs"), "kubelet", c.Bins.Kubelet,
		"--config="+cfgPath,
		"--kubeconfig="+kubeconfigPath,
		"--root-dir="+filepath.Join(n.dir, "kubelet"),
		"--cert-dir="+pki,
		"--hostname-override="+c.NodeName,
		"--node-ip="+n.nodeIP.String(),
		"--v=1")
	must(t, err)
	ctx := context.Background()
	if err := waitFor(90*time.Second, "node "+c.NodeName+" Ready", func() (bool, error) {
		nd, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range nd.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, fmt.Errorf("condition Ready=%s: %s", cond.Status, cond.Message)
			}
		}
		return false, nil
	}, n.kubelet, n.containerd); err != nil {
		fatalf(t, []*proc{n.kubelet, n.containerd}, "kubeenv: %v", err)
	}
	if err := c.markReady(ctx, c.NodeName); err != nil {
		t.Fatal(err)
	}
}

// addNodeIP gives the node an address of its own on a link of its own: kubelet
// refuses a loopback node IP, and the apiserver reaches kubelet at the
// node's address. A /32 outside the pod subnet, so pods (which have only
// their subnet's route) have no route to kubelet's port.
func (n *node) addNodeIP() error {
	p, err := freeSubnet(245)
	if err != nil {
		return err
	}
	n.nodeIP = p.Addr().Next()
	// An empty bridge: the test kernel may lack the dummy driver.
	l := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: n.link}}
	if err := netlink.LinkAdd(l); err != nil {
		return fmt.Errorf("kubeenv: add link %s: %w", n.link, err)
	}
	addr, _ := netlink.ParseAddr(n.nodeIP.String() + "/32")
	if err := netlink.AddrAdd(l, addr); err != nil {
		return fmt.Errorf("kubeenv: address %s on %s: %w", n.nodeIP, n.link, err)
	}
	return netlink.LinkSetUp(l)
}

// freeSubnet picks a /24 of 10.<second>.0.0/16 that no address or route
// of the host overlaps (another cluster's bridge included).
func freeSubnet(second byte) (netip.Prefix, error) {
	var taken []netip.Prefix
	routes, err := network.Dump(func() ([]netlink.Route, error) { return netlink.RouteList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return netip.Prefix{}, err
	}
	for _, r := range routes {
		if r.Dst != nil {
			// A default route (0.0.0.0/0) overlaps everything and takes
			// nothing.
			if p, err := netip.ParsePrefix(r.Dst.String()); err == nil && p.Bits() > 0 {
				taken = append(taken, p)
			}
		}
	}
	addrs, err := network.Dump(func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return netip.Prefix{}, err
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.IPNet.String()); err == nil {
			taken = append(taken, p.Masked())
		}
	}
	start := int(randHex(1)[0])
	for i := range 256 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, second, byte(start + i), 0}), 24)
		if !slices.ContainsFunc(taken, p.Overlaps) {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("kubeenv: every /24 of 10.%d.0.0/16 overlaps an address or route of the host", second)
}

// writeCNI writes the pod network: a bridge whose address (the subnet's
// first) makes pods reachable from the host, and no default route in the
// pods (isDefaultGateway false, no IPAM routes but ServiceCIDR's with
// Options.ServiceProxy, no masquerade): a pod can reach its subnet (and
// the Services kube-proxy translates) and nothing else, certainly nothing
// off this machine.
func (n *node) writeCNI() error {
	routes := []any{}
	if n.serviceRoute {
		routes = append(routes, map[string]string{"dst": ServiceCIDR})
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       n.netName,
		"plugins": []any{map[string]any{
			"type":             "bridge",
			"bridge":           n.bridge,
			"isGateway":        true,
			"isDefaultGateway": false,
			"ipMasq":           false,
			"hairpinMode":      true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": n.subnet.String()}}},
				"routes":  routes,
				"dataDir": filepath.Join(n.dir, "cni", "ipam"),
			},
		}},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.dir, "cni", "net.d", "10-berth.conflist"), b, 0o644)
}

// guard adds an nft table that drops whatever the host would forward from
// the pod bridge anywhere but the pod subnet, and into it from anywhere
// else: a pod that gave itself a default route still reaches nothing off
// this machine, whatever the host's ip_forward.
func (n *node) guard() error {
	conn, err := nftables.New()
	if err != nil {
		return err
	}
	tbl := conn.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: n.nft})
	prio := nftables.ChainPriorityFilter
	ch := conn.AddChain(&nftables.Chain{Name: "forward", Table: tbl, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: prio})
	rule := func(parts ...[]expr.Any) {
		conn.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: nftexpr.Cat(parts...)})
	}
	rule(nftexpr.IfnameCmp(expr.MetaKeyIIFNAME, expr.CmpOpEq, n.bridge), nftexpr.NFProto(true),
		nftexpr.AddrMatch(false, n.subnet, expr.CmpOpEq), nftexpr.One(nftexpr.Accept()))
	rule(nftexpr.IfnameCmp(expr.MetaKeyIIFNAME, expr.CmpOpEq, n.bridge), nftexpr.One(nftexpr.Drop()))
	rule(nftexpr.IfnameCmp(expr.MetaKeyOIFNAME, expr.CmpOpEq, n.bridge), nftexpr.One(nftexpr.Drop()))
	return conn.Flush()
}

func (n *node) unguard() error {
	conn, err := nftables.New()
	if err != nil {
		return err
	}
	conn.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: n.nft})
	if err := conn.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// writeContainerdConfig: every path containerd and its shims write is
// under the node's dir (root, state, runc's state, network namespaces, CNI
// config), so two clusters and the host's own containerd never meet.
// With gVisor (runsc's bins) a second handler, runsc, runs gVisor's shim
// (gvisor.go).
func (n *node) writeContainerdConfig(runsc RunscBinaries) error {
	d := func(p string) string { return strconv.Quote(filepath.Join(n.dir, p)) }
	gvisor, err := n.runscRuntime(runsc)
	if err != nil {
		return err
	}
	cfg := `version = 2
root = ` + d("containerd/root") + `
state = ` + d("containerd/state") + `
# Plugins that would write outside the node's dir, or that need what a test
# host lacks.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = ` + strconv.Quote(n.sock) + `

[ttrpc]
  address = ` + strconv.Quote(n.sock+".ttrpc") + `

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = ` + strconv.Quote(PauseImage) + `
  # root here lacks CAP_SYS_RESOURCE: lowering a container's oom_score_adj
  # below containerd's own fails, so keep it at or above.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = ` + d("runc") + `
        SystemdCgroup = false
` + gvisor + `  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = ` + strconv.Quote(CNIBinDir) + `
    conf_dir = ` + d("cni/net.d") + `
    max_conf_num = 1
`
	return os.WriteFile(filepath.Join(n.dir, "containerd", "config.toml"), []byte(cfg), 0o644)
}

// kubeletConfig is the KubeletConfiguration; docs/kubernetes.md says why
// each setting.
func (n *node) kubeletConfig(port int, caPath, crt, key string) string {
	q := strconv.Quote
	return `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
cgroupRoot: ` + q(n.cgroup) + `
containerRuntimeEndpoint: ` + q("unix://"+n.sock) + `
address: ` + n.nodeIP.String() + `
port: ` + strconv.Itoa(port) + `
readOnlyPort: 0
healthzPort: 0
tlsCertFile: ` + q(crt) + `
tlsPrivateKeyFile: ` + q(key) + `
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: ` + q(caPath) + `}
authorization:
  mode: AlwaysAllow
podLogsDir: ` + q(filepath.Join(n.dir, "pod-logs")) + `
resolvConf: ""
makeIPTablesUtilChains: false
failSwapOn: false
rotateCertificates: false
serverTLSBootstrap: false
registerNode: true
staticPodPath: ""
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {}
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusUpdateFrequency: 5s
`
}

// teardownNode removes every trace of the node: pods deleted through the
// API while kubelet still runs (so their sandboxes are stopped and their
// CNI attachments undone properly), then kubelet stopped, any task left
// killed and deleted in containerd, shims and containerd stopped by pid,
// mounts under the node's dir unmounted, the cgroup parent, bridge, nft
// table and CNI cache files removed.
func (c *Cluster) teardownNode(t testing.TB) {
	t.Helper()
	n := c.node
	var errs []error
	if n.kubelet != nil {
		if done, _ := n.kubelet.exited(); !done {
			if err := c.deleteNodePods(45 * time.Second); err != nil {
				errs = append(errs, err)
			}
		}
		n.kubelet.stop(15 * time.Second)
		n.cleanDevicePluginDir()
	}
	if n.containerd != nil {
		if done, _ := n.containerd.exited(); !done {
			n.removeTasks()
		}
	}
	// Whatever still runs in the pods' cgroups (it should be nothing).
	for _, d := range testenv.CgroupDirs(n.cgroup) {
		killCgroupTree(d)
	}
	shims := n.shims()
	n.containerd.stop(15 * time.Second)
	for _, s := range shims {
		_ = syscall.Kill(s.pid, syscall.SIGKILL)
		if s.socket != "" {
			os.Remove(s.socket)
		}
	}
	if err := unmountUnder(c.Dir); err != nil {
		errs = append(errs, err)
	}
	for _, d := range testenv.CgroupDirs(n.cgroup) {
		if err := rmCgroupTree(d); err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range []string{n.bridge, n.link} {
		if l, err := netlink.LinkByName(name); err == nil {
			if err := netlink.LinkDel(l); err != nil {
				errs = append(errs, fmt.Errorf("delete link %s: %w", name, err))
			}
		}
	}
	if err := n.unguard(); err != nil {
		errs = append(errs, fmt.Errorf("delete nft table %s: %w", n.nft, err))
	}
	// libcni's result cache is not configurable in containerd 1.6.
	cached, _ := filepath.Glob("/var/lib/cni/results/" + n.netName + "-*")
	for _, f := range cached {
		os.Remove(f)
	}
	// kubelet links container logs from the fixed /var/log/containers.
	links, _ := filepath.Glob("/var/log/containers/*.log")
	for _, l := range links {
		if dst, err := os.Readlink(l); err == nil && strings.HasPrefix(dst, c.Dir+"/") {
			os.Remove(l)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Errorf("kubeenv: node teardown: %v", err)
	}
}

// deleteNodePods deletes every pod bound to the node and waits until
// kubelet has confirmed each one gone (sandbox stopped, network torn down).
func (c *Cluster) deleteNodePods(timeout time.Duration) error {
	ctx := context.Background()
	sel := metav1.ListOptions{FieldSelector: "spec.nodeName=" + c.NodeName}
	pods, err := c.Client.CoreV1().Pods("").List(ctx, sel)
	if err != nil {
		return err
	}
	grace := int64(1)
	for _, p := range pods.Items {
		_ = c.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	}
	return waitFor(timeout, "the node's pods to be gone", func() (bool, error) {
		pods, err := c.Client.CoreV1().Pods("").List(ctx, sel)
		if err != nil {
			return false, err
		}
		return len(pods.Items) == 0, fmt.Errorf("%d pods left", len(pods.Items))
	}, c.node.kubelet)
}

// removeTasks kills and deletes every task and container containerd
// still has (a pod kubelet did not get to), so their shims exit.
func (n *node) removeTasks() {
	out, err := n.ctr("tasks", "ls", "-q")
	if err != nil {
		return
	}
	for id := range strings.FieldsSeq(string(out)) {
		_, _ = n.ctr("tasks", "kill", "-s", "SIGKILL", id)
		_, _ = n.ctr("tasks", "delete", "-f", id)
	}
	out, err = n.ctr("containers", "ls", "-q")
	if err != nil {
		return
	}
	for id := range strings.FieldsSeq(string(out)) {
		_, _ = n.ctr("containers", "delete", id)
	}
}

type shim struct {
	pid    int
	socket string
}

// shims are the containerd-shim processes serving this node's containerd
// (their argv names its socket), with their ttrpc sockets.
func (n *node) shims() []shim {
	var out []shim
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(string(b), "\x00")
		if !strings.HasPrefix(filepath.Base(argv[0]), "containerd-shim") || !slices.Contains(argv, n.sock) {
			continue
		}
		s := shim{pid: pid}
		if i := slices.Index(argv, "-id"); i > 0 && i+1 < len(argv) {
			addr, _ := os.ReadFile(filepath.Join(n.dir, "containerd", "state", "io.containerd.runtime.v2.task", "k8s.io", argv[i+1], "address"))
			s.socket = strings.TrimPrefix(strings.TrimSpace(string(addr)), "unix://")
		}
		out = append(out, s)
	}
	return out
}

// killCgroupTree SIGKILLs every process in the cgroup dir and below, by
// pid, until it is empty (at most a few seconds).
func killCgroupTree(dir string) {
	for range 50 {
		var pids []int
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				pids = append(pids, pidsIn(filepath.Join(p, "cgroup.procs"))...)
			}
			return nil
		})
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rmCgroupTree removes a cgroup dir tree, deepest first.
func rmCgroupTree(dir string) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		var err error
		for range 20 { // a killed task may take a moment to leave
			if err = os.Remove(dirs[i]); err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// unmountUnder detaches every mount under dir, deepest first (kubelet's
// volume tmpfs, containerd's rootfs overlays, shm, network namespaces).
func unmountUnder(dir string) error {
	var errs []error
	for range 3 {
		ms, err := overlay.MountsUnder(dir)
		if err != nil {
			return err
		}
		if len(ms) == 0 {
			return nil
		}
		slices.SortFunc(ms, func(a, b string) int { return len(b) - len(a) })
		errs = errs[:0]
		for _, m := range ms {
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
			}
		}
	}
	if ms, _ := overlay.MountsUnder(dir); len(ms) > 0 {
		errs = append(errs, fmt.Errorf("mounts remain under %s: %v", dir, ms))
	}
	return errors.Join(errs...)
}

// PodIP waits for pod ns/name to be Running with an IP and returns it.
func (c *Cluster) PodIP(t testing.TB, ns, name string, timeout time.Duration) net.IP {
	t.Helper()
	var ip net.IP
	var procs []*proc
	if c.node != nil {
		procs = []*proc{c.node.kubelet, c.node.containerd}
	}
	err := waitFor(timeout, "pod "+ns+"/"+name+" Running", func() (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("pod is %s", p.Status.Phase)
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return false, fmt.Errorf("phase %s, conditions %v, containers %v", p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
		}
		ip = net.ParseIP(p.Status.PodIP)
		return true, nil
	}, procs...)
	if err != nil {
		fatalf(t, procs, "kubeenv: %v", err)
	}
	return ip
}
