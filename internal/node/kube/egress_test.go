package kube

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/network"
	"github.com/berth-sh/berth/internal/network/egressrule"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
)

func egressBackend() *Backend {
	b := testBackend()
	b.cfg.Resolver = ResolverConfig{Address: netip.MustParseAddr("10.96.0.53")}
	b.cfg.Resolver.defaults()
	return b
}

// peersOf lists a rule's ipBlocks as text, "cidr ports".
func ruleText(r networkingv1.NetworkPolicyEgressRule) string {
	var to, ports []string
	for _, p := range r.To {
		if p.IPBlock == nil || len(p.IPBlock.Except) > 0 || p.PodSelector != nil || p.NamespaceSelector != nil {
			to = append(to, "peer?")
			continue
		}
		to = append(to, p.IPBlock.CIDR)
	}
	for _, p := range r.Ports {
		s := string(*p.Protocol)
		if p.Port != nil {
			s += "/" + p.Port.String()
		}
		ports = append(ports, s)
	}
	if len(ports) == 0 {
		ports = []string{"all"}
	}
	return strings.Join(to, ",") + " " + strings.Join(ports, ",")
}

// The egress policy is exactly: the resolver on 53, each CIDR rule on
// its ports, each domain rule's unexpired pins on its ports; a domain
// rule with no pin adds no rule (a rule without peers would allow every
// destination), and nothing else is ever allowed.
func TestEgressPolicyFor(t *testing.T) {
	b := egressBackend()
	now := time.Unix(1_800_000_000, 0)
	pins := network.Pins{
		{Name: "allowed.test", Addr: netip.MustParseAddr("10.244.1.5")}:      now.Add(time.Minute),
		{Name: "allowed.test", Addr: netip.MustParseAddr("10.244.1.6")}:      now.Add(-time.Second), // expired
		{Name: "a.wild.test", Addr: netip.MustParseAddr("2001:db8::1")}:      now.Add(time.Hour),
		{Name: "other.test", Addr: netip.MustParseAddr("192.0.2.9")}:         now.Add(time.Hour), // no rule
		{Name: "allowed.test", Addr: netip.MustParseAddr("169.254.169.254")}: now.Add(time.Hour), // never
	}
	allow := []string{"allowed.test:80", "udp://10.0.0.0/8:53,123", "*.wild.test", "nopins.test:443", "tcp://192.0.2.0/24"}
	p, err := b.egressPolicyFor("abc", allow, pins, now)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range p.Spec.Egress {
		if len(r.To) == 0 {
			t.Fatalf("an egress rule without peers (allows everything): %+v", r)
		}
		got = append(got, ruleText(r))
	}
	want := []string{
		"10.96.0.53/32 UDP/53,TCP/53",
		"10.244.1.5/32 TCP/80,UDP/80",
		"10.0.0.0/8 UDP/53,UDP/123",
		"2001:db8::1/128 all",
		"192.0.2.0/24 TCP",
	}
	if !slices.Equal(got, want) {
		t.Errorf("egress rules:\n got %q\nwant %q", got, want)
	}
	if len(p.Spec.PolicyTypes) != 2 || len(p.Spec.Ingress) != 1 || len(p.Spec.Ingress[0].Ports) != 1 ||
		p.Spec.Ingress[0].Ports[0].Port.IntValue() != 7070 || len(p.Spec.Ingress[0].From) != 0 {
		t.Errorf("ingress/types: %+v %+v", p.Spec.PolicyTypes, p.Spec.Ingress)
	}
	if p.Spec.PodSelector.MatchLabels[LabelSandbox] != "abc" {
		t.Errorf("selector %v", p.Spec.PodSelector)
	}
	// The annotations give the state back: rules as given, unexpired pins.
	allow2, pins2, ok, err := policyState(p)
	if err != nil || !ok || !slices.Equal(allow2, allow) {
		t.Fatalf("state = %v %v %v", allow2, ok, err)
	}
	if len(pins2) != 4 || !pins2.Has("allowed.test", netip.MustParseAddr("10.244.1.5"), now) ||
		pins2.Has("allowed.test", netip.MustParseAddr("10.244.1.6"), now.Add(-time.Hour)) {
		t.Errorf("pins read back: %v", pins2)
	}
	var recs []pinRecord
	if err := json.Unmarshal([]byte(p.Annotations[AnnotationPins]), &recs); err != nil || len(recs) != 4 {
		t.Errorf("pins annotation %s: %v", p.Annotations[AnnotationPins], err)
	}

	// No rules: the resolver only.
	p, err = b.egressPolicyFor("abc", nil, nil, now)
	if err != nil || len(p.Spec.Egress) != 1 || p.Annotations[AnnotationAllow] != "[]" {
		t.Fatalf("no rules: %+v %v", p.Spec.Egress, err)
	}
	// Bad rules are refused, not half-applied.
	if _, err := b.egressPolicyFor("abc", []string{"bad rule!"}, nil, now); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("bad rule: %v", err)
	}
}

// keepPins: a pin of a name no rule allows any more goes, as does an
// expired one and one of an address never pinnable.
func TestKeepPins(t *testing.T) {
	now := time.Now()
	rules, _ := egressrule.ParseAll([]string{"*.b.test:443"})
	pins := network.Pins{
		{Name: "x.b.test", Addr: netip.MustParseAddr("192.0.2.1")}: now.Add(time.Minute),
		{Name: "b.test", Addr: netip.MustParseAddr("192.0.2.2")}:   now.Add(time.Minute),
		{Name: "y.b.test", Addr: netip.MustParseAddr("192.0.2.3")}: now.Add(-time.Minute),
		{Name: "z.b.test", Addr: netip.MustParseAddr("127.0.0.1")}: now.Add(time.Minute),
	}
	if !keepPins(pins, rules, now) || len(pins) != 1 || !pins.Has("x.b.test", netip.MustParseAddr("192.0.2.1"), now) {
		t.Errorf("kept %v", pins)
	}
	if keepPins(pins, rules, now) {
		t.Error("a second prune reported a change")
	}
}

// An egress pod's only nameserver is berth's resolver; a mode none pod
// keeps the cluster's DNS policy.
func TestEgressPodDNS(t *testing.T) {
	b, sb := egressBackend(), testSandbox()
	sb.Spec.Network = "egress"
	p := b.podFor(sb, "")
	if p.Spec.DNSPolicy != corev1.DNSNone || p.Spec.DNSConfig == nil ||
		!slices.Equal(p.Spec.DNSConfig.Nameservers, []string{"10.96.0.53"}) || len(p.Spec.DNSConfig.Searches) != 0 {
		t.Errorf("dns: %s %+v", p.Spec.DNSPolicy, p.Spec.DNSConfig)
	}
	sb.Spec.Network = ""
	if p := b.podFor(sb, ""); p.Spec.DNSPolicy != "" || p.Spec.DNSConfig != nil {
		t.Errorf("mode none dns: %s %+v", p.Spec.DNSPolicy, p.Spec.DNSConfig)
	}
}

// Without a resolver address mode egress stays refused, with the reason;
// a quarantine's cut is refused either way.
func TestEgressRefusedWithoutResolver(t *testing.T) {
	ctx := context.Background()
	sb := &sandbox.Sandbox{ID: "abc", Spec: sandbox.Spec{Network: "egress", Allow: []string{"a.test"}}}
	b := testBackend()
	_, _, err := b.Allocate(ctx, "abc", nil)
	if !errors.Is(err, errdefs.ErrNotSupported) || !strings.Contains(err.Error(), "--kube-resolver-address") {
		t.Errorf("allocate: %v", err)
	}
	if err := b.SetRules(ctx, sb, false); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("set rules: %v", err)
	}
	if err := egressBackend().SetRules(ctx, sb, true); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("cut: %v", err)
	}
	if _, _, err := egressBackend().Allocate(ctx, "abc", nil); err != nil {
		t.Errorf("allocate with a resolver: %v", err)
	}
	// Secrets at egress need a proxy on the pod's path: the backend is no
	// node.EgressProxy, and says why.
	if _, err := node.Need[node.EgressProxy](egressBackend(), node.OpEgressSecrets); !errors.Is(err, errdefs.ErrNotSupported) || !strings.Contains(err.Error(), "NetworkPolicy") {
		t.Errorf("egress CA: %v", err)
	}
}

// One source's budget: at most MaxInflight queries at once and QPS with
// a burst; another source has its own.
func TestResolverAdmit(t *testing.T) {
	b := egressBackend()
	b.cfg.Resolver.QPS, b.cfg.Resolver.Burst, b.cfg.Resolver.MaxInflight = 1, 5, 3
	r := &resolver{b: b, sources: map[netip.Addr]*source{}}
	a, other := netip.MustParseAddr("10.244.0.7"), netip.MustParseAddr("10.244.0.8")
	var dones []func()
	for i := 0; i < 3; i++ {
		done, ok := r.admit(a)
		if !ok {
			t.Fatalf("query %d refused", i)
		}
		dones = append(dones, done)
	}
	if _, ok := r.admit(a); ok {
		t.Error("a 4th query in flight admitted")
	}
	if done, ok := r.admit(other); !ok {
		t.Error("another source refused")
	} else {
		done()
	}
	for _, d := range dones {
		d()
	}
	// Burst 5: 3 taken above, the 4th refusal took none; one more and
	// the bucket is dry.
	n := 0
	for i := 0; i < 5; i++ {
		if done, ok := r.admit(a); ok {
			n++
			done()
		}
	}
	if n < 1 || n > 2 {
		t.Errorf("%d of 5 admitted after the burst was spent, want 1 or 2", n)
	}
}

// One address holds at most max TCP connections to the resolver; a
// closed one frees its slot.
func TestPerSourceListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &perSourceListener{Listener: ln, max: 2, open: map[netip.Addr]int{}}
	defer l.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	for i := 0; i < 4; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	got := []net.Conn{<-accepted, <-accepted}
	select {
	case <-accepted:
		t.Fatal("a third connection from one address was accepted")
	case <-time.After(300 * time.Millisecond):
	}
	got[0].Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	clients = append(clients, c)
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("no slot after a close")
	}
	for _, c := range clients {
		c.Close()
	}
}

// The chart's peer (berth's own pods) parses, is allowed on the
// resolver's container port only, and bad spellings are refused.
func TestResolverPeer(t *testing.T) {
	p, err := ParseResolverPeer("berth/app.kubernetes.io/name=berth,app.kubernetes.io/instance=berth")
	if err != nil {
		t.Fatal(err)
	}
	if p.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "berth" || len(p.PodSelector.MatchLabels) != 2 ||
		p.PodSelector.MatchLabels["app.kubernetes.io/instance"] != "berth" || p.IPBlock != nil {
		t.Errorf("peer %+v", p)
	}
	for _, bad := range []string{"", "berth", "berth/", "/a=b", "Bad_NS/a=b", "berth/a=b c"} {
		if _, err := ParseResolverPeer(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	b := testBackend()
	b.cfg.Resolver = ResolverConfig{Address: netip.MustParseAddr("10.96.0.53"), Listen: ":5353", Peers: []networkingv1.NetworkPolicyPeer{p}}
	b.cfg.Resolver.defaults()
	pol, err := b.egressPolicyFor("abc", nil, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(pol.Spec.Egress) != 2 || ruleText(pol.Spec.Egress[0]) != "10.96.0.53/32 UDP/53,TCP/53" ||
		ruleText(pol.Spec.Egress[1]) != "peer? UDP/5353,TCP/5353" {
		t.Errorf("egress %+v", pol.Spec.Egress)
	}
}
