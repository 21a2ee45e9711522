package k8s

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/node/kube"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/testenv/kubeenv"
)

// TestEgressOnRealNode: network mode egress on the real node, with a real
// NetworkPolicy enforcer (kube-network-policies) and berth's resolver
// behind a real ClusterIP Service, as the chart deploys it: the backend
// serves it on the pod bridge's address, port 5353, and the Service
// berth-resolver (ClusterIP resolverIP, port 53) leads there through the
// node's real kube-proxy, which keeps the pod's source address (the
// resolver tells sandboxes apart by it). The "internet" is
// two pods: A serves HTTP on 80 and 8080, B on 80; the test's own DNS
// server (loopback, the resolver's only upstream) answers allowed.test
// with A and denied.test with B. A sandbox allowed allowed.test:80
// fetches A by name; denied.test is NXDOMAIN; B by address and A on 8080
// are unreachable, while a pod without a policy reaches B (so the
// enforcer, not the network, stops the sandbox); a pin leaves the policy
// when it expires; SetRules replaces the rules (A unreachable, a CIDR
// rule's B reachable); remove deletes the policy. The resolver refuses
// queries from pods that are no sandbox and from the host, survives
// garbage, and bounds one source's queries.
func TestEgressOnRealNode(t *testing.T) {
	t0 := time.Now()
	var c *kubeenv.Cluster
	checkGone(t, &c)
	c = kubeenv.Start(t, kubeenv.Options{Node: true, ServiceProxy: true})
	np := kubeenv.StartNetworkPolicy(t, c)
	t.Logf("cluster and enforcer up in %v (table %s, queue %d)", time.Since(t0).Round(time.Millisecond), np.Table, np.Queue)
	ctx := context.Background()
	const ns, inet = "berth-sandboxes", "internet"
	c.CreateNamespace(t, ns)
	c.CreateNamespace(t, inet)

	importImages(t, c)

	// The internet: A and B, plain pods without any policy.
	pod := func(name, script string, restart corev1.RestartPolicy) {
		t.Helper()
		_, err := c.Client.CoreV1().Pods(inet).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: c.NodeName, RestartPolicy: restart, Containers: []corev1.Container{{
				Name: "c", Image: baseRef, ImagePullPolicy: corev1.PullNever, Command: []string{"/bin/sh", "-c", script}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	serve := func(body string, ports ...string) string {
		s := "mkdir -p /www && echo " + body + " > /www/index.html"
		for _, p := range ports {
			s += " && httpd -p " + p + " -h /www"
		}
		return s + " && exec sleep 3600"
	}
	pod("a", serve("from-A", "80", "8080"), corev1.RestartPolicyNever)
	pod("b", serve("from-B", "80"), corev1.RestartPolicyNever)
	ipA := c.PodIP(t, inet, "a", 90*time.Second).String()
	ipB := c.PodIP(t, inet, "b", 90*time.Second).String()
	gw := c.PodSubnet().Addr().Next() // the bridge's address, the pods' way to the host
	// The resolver's Service: no selector (berth runs on the host here, not
	// in a pod), one EndpointSlice naming the bridge's address.
	listen := netip.AddrPortFrom(gw, 5353)
	serviceFor(t, c, ns, "berth-resolver", resolverIP, 53, listen)
	t.Logf("A %s, B %s, resolver %s behind Service IP %s", ipA, ipB, listen, resolverIP)

	// The upstream: the test's own DNS server on loopback.
	const ttl = 8
	upstream := startUpstream(t, map[string]string{"allowed.test.": ipA, "denied.test.": ipB}, ttl)

	var mu sync.Mutex
	var flows []node.Flow
	b, err := kube.New(ctx, kube.Config{Client: c.Client, Namespace: ns, AgentImage: agentRef, Image: baseRef,
		PullPolicy: corev1.PullNever, NodeName: c.NodeName, ReadyTimeout: 90 * time.Second,
		Resolver: kube.ResolverConfig{Address: resolverIP, Listen: listen.String(),
			Upstream: []netip.AddrPort{upstream}, PinMinTTL: ttl * time.Second, QPS: 5, Burst: 10}})
	if err != nil {
		t.Fatal(err)
	}
	b.Start(node.Hooks{Flow: func(f node.Flow) { mu.Lock(); flows = append(flows, f); mu.Unlock() }})
	defer b.Close(false)
	if cl := b.Classes(); !cl[0].Caps.Egress {
		t.Fatalf("class %s without egress though a resolver is configured", cl[0].Name)
	}

	sb := &sandbox.Sandbox{ID: randID(), Name: "egress", Spec: sandbox.Spec{Template: "base", Network: "egress",
		Allow:     []string{"allowed.test:80"},
		Resources: sandbox.Resources{CPUs: 0.5, MemoryBytes: 128 << 20, Pids: 256}}}
	t.Cleanup(func() { _ = b.Remove(context.Background(), sb) })
	if _, _, err := b.Allocate(ctx, sb.ID, func(string) bool { return false }); err != nil {
		t.Fatalf("allocate: %v", err)
	}
	t1 := time.Now()
	if err := b.Provision(ctx, sb); err != nil {
		t.Fatalf("provision: %v", err)
	}
	t.Logf("egress sandbox provisioned in %v", time.Since(t1).Round(time.Millisecond))
	exec := func(script string) (string, int) {
		t.Helper()
		var out bytes.Buffer
		ex, err := b.Agent(sb).Exec(ctx, agent.ExecRequest{Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/bin"}},
			agent.ExecIO{Stdout: &out, Stderr: &out})
		if err != nil {
			t.Fatalf("exec %q: %v", script, err)
		}
		return out.String(), ex.Code
	}
	// fetch GETs / of addr:port with busybox's nc (busybox-static's wget
	// crashes without the NSS files of a libc; the image has none).
	fetch := func(addr, port string) (string, int) {
		t.Helper()
		return exec(httpGet(addr, port))
	}
	// byName looks name up with busybox's nslookup (through the sandbox's
	// resolv.conf: berth's resolver) and fetches the first address it
	// answered: busybox-static's wget cannot resolve names itself (static
	// glibc's getaddrinfo needs NSS modules the image does not have).
	byName := func(name string) (string, int) {
		t.Helper()
		return exec(`a=$(busybox nslookup ` + name + ` | busybox sed -n 's/^Address: *\([0-9.]*\)$/\1/p' | busybox head -1); ` +
			`[ -n "$a" ] || { echo "no address for ` + name + `"; exit 2; }; ` + httpGet("$a", "80"))
	}
	// blocked: the connection times out (the enforcer drops it), which
	// is neither an answer nor a crash of the client.
	blocked := func(what, addr, port string) {
		t.Helper()
		out, code := fetch(addr, port)
		if code == 0 || code >= 128 || strings.Contains(out, "from-") || strings.Contains(out, "refused") {
			t.Errorf("%s: %q, exit %d; want the connection dropped", what, out, code)
		}
	}
	policy := func() (pins string, blocks []string) {
		t.Helper()
		p, err := c.Client.NetworkingV1().NetworkPolicies(ns).Get(ctx, "berth-"+sb.ID+"-net", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Spec.Egress {
			for _, to := range r.To {
				if to.IPBlock != nil {
					blocks = append(blocks, to.IPBlock.CIDR)
				}
			}
		}
		return p.Annotations[kube.AnnotationPins], blocks
	}
	if out, _ := exec("cat /etc/resolv.conf"); !strings.Contains(out, "nameserver "+resolverIP.String()) || strings.Count(out, "nameserver") != 1 {
		t.Fatalf("the sandbox's resolv.conf is not berth's resolver alone:\n%s", out)
	}
	if _, blocks := policy(); !slices.Equal(blocks, []string{resolverIP.String() + "/32"}) {
		t.Fatalf("before any lookup the policy allows %v, want the resolver only", blocks)
	}

	// Allowed by name, through the Service: the lookup pins A in the
	// policy before the answer (a translation that hid the sandbox's
	// address would make the resolver refuse it).
	t2 := time.Now()
	if out, code := byName("allowed.test"); code != 0 || !strings.Contains(out, "from-A") {
		t.Fatalf("allowed.test: %q, exit %d", out, code)
	}
	t.Logf("lookup, pin and fetch of allowed.test in %v", time.Since(t2).Round(time.Millisecond))
	if pins, blocks := policy(); !strings.Contains(pins, ipA) || !slices.Contains(blocks, ipA+"/32") {
		t.Fatalf("A not pinned: pins %s, blocks %v", pins, blocks)
	}
	// A's other port, B by address, denied.test by name: all refused.
	blocked("A's port 8080 (not in the rule)", ipA, "8080")
	blocked("B by address (no lookup, no rule)", ipB, "80")
	if out, code := exec("busybox nslookup denied.test"); code == 0 || !strings.Contains(out, "NXDOMAIN") {
		t.Errorf("denied.test resolved: %q (exit %d)", out, code)
	}
	if out, code := byName("denied.test"); code == 0 {
		t.Errorf("denied.test answered: %q", out)
	}

	// The enforcer, not the network, stops the sandbox: a pod with no
	// policy reaches B, and the enforcer's table is loaded.
	pod("control", httpGet(ipB, "80")+" && busybox nslookup allowed.test "+resolverIP.String()+"; sleep 1", corev1.RestartPolicyNever)
	ctrl := waitPodDone(t, c, inet, "control")
	if !strings.Contains(ctrl.log, "from-B") {
		t.Errorf("a pod without a policy did not reach B: %q", ctrl.log)
	}
	if !strings.Contains(ctrl.log, "REFUSED") {
		t.Errorf("the resolver answered a pod that is no sandbox: %q", ctrl.log)
	}
	if !np.Loaded() || !np.Running() {
		t.Fatalf("the enforcer is not live (table %v, running %v):\n%s", np.Loaded(), np.Running(), np.Log(30))
	}

	// The door itself: the host is no sandbox; garbage does not stop it.
	// (Straight to the listener: the host has no route to the Service
	// range of its own, and a packet there could leave the machine.)
	res := listen.String()
	if r := query(t, "udp", res, "allowed.test."); r == nil || r.Rcode != dns.RcodeRefused {
		t.Errorf("a query from the host: %v", r)
	}
	if conn, err := net.Dial("udp", res); err == nil {
		for _, junk := range [][]byte{{}, {0}, bytes.Repeat([]byte{0xff}, 512), bytes.Repeat([]byte{0}, 65000)} {
			_, _ = conn.Write(junk)
		}
		conn.Close()
	}
	if conn, err := net.Dial("tcp", res); err == nil {
		_, _ = conn.Write([]byte{0xff, 0xff, 1, 2, 3})
		conn.Close()
	}
	if r := query(t, "tcp", res, "allowed.test."); r == nil || r.Rcode != dns.RcodeRefused {
		t.Errorf("after garbage, over TCP: %v", r)
	}
	// A flood from the sandbox is bounded: of 40 lookups at once (an A
	// and an AAAA query each) most are refused (5 a second, a burst of
	// 10, 8 at once), and the upstream saw few of them.
	before := upstreamQueries()
	t3 := time.Now()
	out, _ := exec(`for i in $(busybox seq 40); do busybox nslookup allowed.test >/dev/null 2>&1 & done; wait; echo done`)
	n, took := upstreamQueries()-before, time.Since(t3)
	t.Logf("a flood of 40 lookups in %v reached the upstream %d times", took.Round(time.Millisecond), n)
	if limit := 10 + int(5*took.Seconds()) + 2; n > limit || n == 0 {
		t.Errorf("a flood of 40 lookups reached the upstream %d times (bound %d; %q)", n, limit, out)
	}

	// Expiry: once the pin's time is up (the flood may have renewed it),
	// the reconciler's tick takes A out of the policy, and A is
	// unreachable by address. The wait also refills the flooder's budget.
	time.Sleep(time.Until(t3.Add(took + (ttl+1)*time.Second)))
	b.Tick(ctx, nil)
	if pins, blocks := policy(); strings.Contains(pins, ipA) || slices.Contains(blocks, ipA+"/32") {
		t.Errorf("an expired pin stayed: pins %s, blocks %v", pins, blocks)
	}
	blocked("A after its pin expired", ipA, "80")

	// SetRules: allowed.test goes (its pin with it), a CIDR rule for B
	// comes.
	if out, code := byName("allowed.test"); code != 0 || !strings.Contains(out, "from-A") {
		t.Fatalf("allowed.test again: %q, exit %d", out, code)
	}
	sb.Spec.Allow = []string{"tcp://" + ipB + "/32:80"}
	if err := b.SetRules(ctx, sb, false); err != nil {
		t.Fatalf("set rules: %v", err)
	}
	if pins, blocks := policy(); strings.Contains(pins, ipA) || !slices.Contains(blocks, ipB+"/32") {
		t.Errorf("after SetRules: pins %s, blocks %v", pins, blocks)
	}
	blocked("A after its rule went", ipA, "80")
	if out, code := exec("busybox nslookup allowed.test"); code == 0 || !strings.Contains(out, "NXDOMAIN") {
		t.Errorf("allowed.test still resolves after its rule went: %q", out)
	}
	if out, code := fetch(ipB, "80"); code != 0 || !strings.Contains(out, "from-B") {
		t.Errorf("B under its CIDR rule: %q, exit %d", out, code)
	}
	if err := b.SetRules(ctx, sb, true); err == nil {
		t.Error("a quarantine's cut was accepted")
	}

	// The flow log saw both decisions.
	mu.Lock()
	var allowed, denied bool
	for _, f := range flows {
		if f.SandboxID != sb.ID || f.Kind != "dns" {
			t.Errorf("flow %+v", f)
		}
		allowed = allowed || f.Name == "allowed.test" && f.Decision == "allow" && f.Rule == "allowed.test port 80"
		denied = denied || f.Name == "denied.test" && f.Decision == "deny"
	}
	t.Logf("%d flow records", len(flows))
	mu.Unlock()
	if !allowed || !denied {
		t.Errorf("flows: allow of allowed.test %v, deny of denied.test %v", allowed, denied)
	}

	// Remove: the policy goes with the pod.
	if err := b.Remove(ctx, sb); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if left := labelled(t, c, ns, sb.ID); len(left) > 0 {
		t.Errorf("after remove: %v", left)
	}
}

// resolverIP is the ClusterIP of berth's resolver Service in the egress
// test (as the chart's egress.resolverClusterIP: a fixed free address of
// the Service range).
var resolverIP = netip.MustParseAddr("10.96.0.53")

// serviceFor makes Service ns/name with ClusterIP ip and port (UDP and
// TCP) without a selector, and its EndpointSlice to target, then waits
// until kube-proxy translates it.
func serviceFor(t *testing.T, c *kubeenv.Cluster, ns, name string, ip netip.Addr, port int32, target netip.AddrPort) {
	t.Helper()
	ctx := context.Background()
	tp := int32(target.Port())
	_, err := c.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{ClusterIP: ip.String(), Ports: []corev1.ServicePort{
			{Name: "dns", Protocol: corev1.ProtocolUDP, Port: port, TargetPort: intstr.FromInt32(tp)},
			{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(tp)},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("service %s: %v", name, err)
	}
	udp, tcp, ready := corev1.ProtocolUDP, corev1.ProtocolTCP, true
	dnsName, tcpName := "dns", "dns-tcp"
	_, err = c.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-1", Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "berth-test"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{target.Addr().String()},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}, NodeName: &c.NodeName}},
		Ports: []discoveryv1.EndpointPort{{Name: &dnsName, Protocol: &udp, Port: &tp}, {Name: &tcpName, Protocol: &tcp, Port: &tp}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("endpointslice of %s: %v", name, err)
	}
	c.WaitServiceRouted(t, ns, name, 60*time.Second)
}

// httpGet is a shell command that GETs / of addr:port over HTTP/1.0.
func httpGet(addr, port string) string {
	return `printf 'GET / HTTP/1.0\r\n\r\n' | busybox nc -w 4 ` + addr + ` ` + port
}

var (
	upMu    sync.Mutex
	upCount int
)

func upstreamQueries() int { upMu.Lock(); defer upMu.Unlock(); return upCount }

// startUpstream serves names (A records, ttl) on loopback UDP and TCP;
// everything else is NXDOMAIN.
func startUpstream(t *testing.T, names map[string]string, ttl uint32) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort(pc.LocalAddr().String())
	ln, err := net.Listen("tcp", ap.String())
	if err != nil {
		t.Fatal(err)
	}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		upMu.Lock()
		upCount++
		upMu.Unlock()
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		ip, ok := names[strings.ToLower(q.Name)]
		switch {
		case !ok:
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl},
				A: net.ParseIP(ip).To4()})
		}
		_ = w.WriteMsg(m)
	})
	servers := []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}}
	for _, s := range servers {
		go func() { _ = s.ActivateAndServe() }()
	}
	t.Cleanup(func() {
		for _, s := range servers {
			_ = s.Shutdown()
		}
	})
	return ap
}

func query(t *testing.T, proto, server, name string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	cl := &dns.Client{Net: proto, Timeout: 3 * time.Second}
	r, _, err := cl.Exchange(m, server)
	if err != nil {
		t.Errorf("query %s over %s: %v", name, proto, err)
		return nil
	}
	return r
}

type podResult struct {
	phase corev1.PodPhase
	log   string
}

// waitPodDone waits for a pod to end and returns its phase and log.
func waitPodDone(t *testing.T, c *kubeenv.Cluster, ns, name string) podResult {
	t.Helper()
	ctx := context.Background()
	var res podResult
	deadline := time.Now().Add(90 * time.Second)
	for {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		res.phase = p.Status.Phase
		if res.phase == corev1.PodSucceeded || res.phase == corev1.PodFailed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s still %s", ns, name, res.phase)
		}
		time.Sleep(200 * time.Millisecond)
	}
	raw, err := c.Client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("log of %s/%s: %v", ns, name, err)
	}
	res.log = string(raw)
	return res
}
