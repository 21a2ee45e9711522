package kube

// Network mode egress on Kubernetes: default deny, the sandbox's rules,
// berth's DNS-pinned resolver (egress_resolver.go) as the pod's only
// nameserver. The sandbox's NetworkPolicy is the whole state, shared by
// every replica: its annotations hold the rules (berth.sh/allow) and the
// addresses the resolver answered for allowed names, until when
// (berth.sh/pins); its spec is a pure function of those, the resolver's
// address and the clock (egressPolicyFor), rewritten through the API with
// a conflict retry whenever either changes.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/network"
	"github.com/berth-sh/berth/internal/network/egressrule"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Annotations of an egress sandbox's NetworkPolicy.
const (
	// AnnotationAllow holds the sandbox's rules, a JSON list of strings
	// in berth's grammar (network.ParseRule).
	AnnotationAllow = "berth.sh/allow"
	// AnnotationPins holds the resolver's pins, a JSON list of
	// {"n": name, "a": address, "u": unix seconds until}.
	AnnotationPins = "berth.sh/pins"
	// AnnotationCut ("true") marks a quarantined sandbox's policy: its
	// rules and pins are kept in the annotations but it allows no egress
	// at all (not even the resolver) until the release.
	AnnotationCut = "berth.sh/cut"
)

// ResolverConfig configures network mode egress: berth's resolver and
// what pods are told about it.
type ResolverConfig struct {
	// Address is the nameserver egress pods get (pod dnsConfig, dnsPolicy
	// None) and may reach on port 53: the resolver Service's ClusterIP
	// when berth runs in the cluster. Unset: mode egress is refused.
	Address netip.Addr
	// Peers are also allowed, on PeerPort (UDP, TCP): berth's own pods,
	// for network plugins that apply policies after a Service's address
	// and port are translated to an endpoint's.
	Peers []networkingv1.NetworkPolicyPeer
	// PeerPort is the resolver's port on Peers (default: Listen's port,
	// else 53).
	PeerPort int
	// Listen is where this replica serves DNS (UDP and TCP), "host:port";
	// "" serves nothing.
	Listen string
	// Upstream are the resolvers asked for allowed names, in order.
	Upstream []netip.AddrPort
	// UpstreamTimeout bounds one upstream query. Default 2 s.
	UpstreamTimeout time.Duration
	// PinMinTTL and PinMaxTTL clamp a pin as the local resolver does
	// (network.ClampTTL). Defaults 30 s and 1 h: a pin costs an API
	// write, so the floor is higher than the local 5 s.
	PinMinTTL, PinMaxTTL time.Duration
	// MaxPins bounds one sandbox's pins (the policy's size). Default 512.
	MaxPins int
	// QPS and Burst bound the queries of one source address. Defaults 20
	// and 40.
	QPS   float64
	Burst int
	// MaxInflight bounds one source's queries in progress. Default 8.
	MaxInflight int
}

func (c *ResolverConfig) defaults() {
	if c.UpstreamTimeout <= 0 {
		c.UpstreamTimeout = 2 * time.Second
	}
	if c.PinMinTTL <= 0 {
		c.PinMinTTL = 30 * time.Second
	}
	if c.PinMaxTTL <= 0 {
		c.PinMaxTTL = time.Hour
	}
	if c.PinMaxTTL < c.PinMinTTL {
		c.PinMaxTTL = c.PinMinTTL
	}
	if c.MaxPins <= 0 {
		c.MaxPins = 512
	}
	if c.QPS <= 0 {
		c.QPS = 20
	}
	if c.Burst <= 0 {
		c.Burst = 40
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = 8
	}
	if c.PeerPort <= 0 || c.PeerPort > 65535 {
		c.PeerPort = 53
		if _, p, err := net.SplitHostPort(c.Listen); err == nil {
			if n, err := strconv.Atoi(p); err == nil && n > 0 && n < 65536 {
				c.PeerPort = n
			}
		}
	}
}

const whyNoResolver = "this daemon has no --kube-resolver-address: egress pods need berth's resolver as their nameserver"

// egressOn reports whether mode egress is offered.
func (b *Backend) egressOn() bool { return b.cfg.Resolver.Address.IsValid() }

// pinRecord is one pin as the annotation holds it.
type pinRecord struct {
	Name  string     `json:"n"`
	Addr  netip.Addr `json:"a"`
	Until int64      `json:"u"`
}

// policyState reads the rules and pins of an egress policy (ok false: the
// policy is not one of mode egress).
func policyState(p *networkingv1.NetworkPolicy) (allow []string, pins network.Pins, ok bool, err error) {
	a, ok := p.Annotations[AnnotationAllow]
	if !ok {
		return nil, nil, false, nil
	}
	if err := json.Unmarshal([]byte(a), &allow); err != nil {
		return nil, nil, true, fmt.Errorf("policy %s: %s: %w", p.Name, AnnotationAllow, err)
	}
	pins = network.Pins{}
	if s := p.Annotations[AnnotationPins]; s != "" {
		var recs []pinRecord
		if err := json.Unmarshal([]byte(s), &recs); err != nil {
			return nil, nil, true, fmt.Errorf("policy %s: %s: %w", p.Name, AnnotationPins, err)
		}
		for _, r := range recs {
			if r.Addr.IsValid() {
				pins[network.PinKey{Name: egressrule.NormDomain(r.Name), Addr: r.Addr.Unmap()}] = time.Unix(r.Until, 0)
			}
		}
	}
	return allow, pins, true, nil
}

// pinnable reports whether an answered address may be pinned: never
// loopback, link-local (cloud metadata), multicast or unspecified
// addresses, whatever an allowed name resolves to.
func pinnable(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsValid() && !a.IsLoopback() && !a.IsLinkLocalUnicast() && !a.IsLinkLocalMulticast() &&
		!a.IsMulticast() && !a.IsUnspecified() && !a.IsInterfaceLocalMulticast()
}

// keepPins drops the pins expired at now and those of names no domain
// rule allows any more.
func keepPins(pins network.Pins, rules []network.Rule, now time.Time) bool {
	return pins.Prune(now, func(k network.PinKey) bool {
		return pinnable(k.Addr) && slices.ContainsFunc(rules, func(r network.Rule) bool { return r.MatchesName(k.Name) })
	})
}

// egressPolicyFor is the NetworkPolicy of egress sandbox id with rules
// allow and pins, as of now: ingress only to the agent's port; egress to
// the resolver on port 53, to each CIDR rule's block on its ports, and to
// the unexpired pinned addresses of each domain rule (one /32 or /128
// block each) on its ports. A domain rule with no pinned address adds
// nothing: an egress rule without peers would allow every destination.
func (b *Backend) egressPolicyFor(id string, allow []string, pins network.Pins, now time.Time) (*networkingv1.NetworkPolicy, error) {
	rules, err := egressrule.ParseAll(allow)
	if err != nil {
		return nil, errdefs.Invalid("%v", err)
	}
	if !b.egressOn() {
		return nil, errdefs.NotSupported("network mode egress: %s", whyNoResolver)
	}
	p := b.policyFor(id)
	p.Annotations = map[string]string{}
	a, _ := json.Marshal(allow)
	if allow == nil {
		a = []byte("[]")
	}
	p.Annotations[AnnotationAllow] = string(a)
	recs := make([]pinRecord, 0, len(pins))
	for k, until := range pins {
		if until.After(now) {
			recs = append(recs, pinRecord{Name: k.Name, Addr: k.Addr, Until: until.Unix()})
		}
	}
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].Name != recs[j].Name {
			return recs[i].Name < recs[j].Name
		}
		return recs[i].Addr.Less(recs[j].Addr)
	})
	ps, _ := json.Marshal(recs)
	p.Annotations[AnnotationPins] = string(ps)

	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	dnsPorts := func(port int) []networkingv1.NetworkPolicyPort {
		p := intstr.FromInt32(int32(port))
		return []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &p}, {Protocol: &tcp, Port: &p}}
	}
	egress := []networkingv1.NetworkPolicyEgressRule{{
		To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: hostPrefix(b.cfg.Resolver.Address)}}},
		Ports: dnsPorts(53)}}
	if len(b.cfg.Resolver.Peers) > 0 {
		egress = append(egress, networkingv1.NetworkPolicyEgressRule{To: slices.Clone(b.cfg.Resolver.Peers),
			Ports: dnsPorts(b.cfg.Resolver.PeerPort)})
	}
	for _, r := range rules {
		var peers []networkingv1.NetworkPolicyPeer
		if r.CIDR.IsValid() {
			peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: r.CIDR.Masked().String()}})
		} else {
			var addrs []netip.Addr
			for _, rec := range recs {
				if r.MatchesName(rec.Name) && pinnable(rec.Addr) {
					addrs = append(addrs, rec.Addr)
				}
			}
			slices.SortFunc(addrs, func(x, y netip.Addr) int { return x.Compare(y) })
			for _, a := range slices.Compact(addrs) {
				peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: hostPrefix(a)}})
			}
		}
		if len(peers) == 0 {
			continue
		}
		egress = append(egress, networkingv1.NetworkPolicyEgressRule{To: peers, Ports: rulePorts(r)})
	}
	p.Spec.Egress = egress
	return p, nil
}

func hostPrefix(a netip.Addr) string {
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()).String()
}

// rulePorts are r's ports per protocol (nil: every port and protocol).
func rulePorts(r network.Rule) []networkingv1.NetworkPolicyPort {
	protos := r.Protocols()
	if len(protos) == 0 {
		return nil
	}
	var out []networkingv1.NetworkPolicyPort
	for _, pr := range protos {
		proto := corev1.Protocol(strings.ToUpper(pr))
		if len(r.Ports) == 0 {
			out = append(out, networkingv1.NetworkPolicyPort{Protocol: &proto})
			continue
		}
		ps := slices.Clone(r.Ports)
		slices.Sort(ps)
		for _, port := range slices.Compact(ps) {
			pt := intstr.FromInt32(int32(port))
			out = append(out, networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &pt})
		}
	}
	return out
}

// ensureNetwork makes sb's NetworkPolicy: deny-all for mode none; for
// mode egress its rules (an existing one, from an earlier start, is
// rewritten to the record's rules, its still-allowed pins kept).
func (b *Backend) ensureNetwork(ctx context.Context, sb *sandbox.Sandbox) error {
	if sb.Spec.Network != "egress" {
		return b.ensurePolicy(ctx, sb.ID)
	}
	p, err := b.egressPolicyFor(sb.ID, sb.Spec.Allow, nil, time.Now())
	if err != nil {
		return err
	}
	_, err = b.client.NetworkingV1().NetworkPolicies(b.cfg.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return b.writeRules(ctx, sb)
	}
	if err != nil {
		return fmt.Errorf("network policy: %w", err)
	}
	return nil
}

// errNotEgress: the policy holds no rules (mode none, or made by another
// version).
var errNotEgress = errors.New("not an egress policy")

// updatePolicy applies change to sandbox id's policy as the API holds it
// and writes the result unless change reports no change; a conflict (a
// replica or the resolver wrote meanwhile) reads it again and retries.
func (b *Backend) updatePolicy(ctx context.Context, id string, change func(allow *[]string, pins network.Pins, now time.Time) (bool, error)) error {
	return b.updatePolicyCut(ctx, id, nil, change)
}

// updatePolicyCut is updatePolicy that also sets the quarantine's cut
// (nil: leaves it as it is). A cut policy keeps its annotations up to
// date but allows no egress.
func (b *Backend) updatePolicyCut(ctx context.Context, id string, cut *bool, change func(allow *[]string, pins network.Pins, now time.Time) (bool, error)) error {
	api := b.client.NetworkingV1().NetworkPolicies(b.cfg.Namespace)
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := api.Get(ctx, policyName(id), metav1.GetOptions{})
		if err != nil {
			return err
		}
		allow, pins, ok, err := policyState(cur)
		if err != nil {
			return err
		}
		if !ok {
			return errNotEgress
		}
		now := time.Now()
		changed, err := change(&allow, pins, now)
		if err != nil {
			return err
		}
		isCut := cur.Annotations[AnnotationCut] == "true"
		if cut != nil && *cut != isCut {
			isCut, changed = *cut, true
		}
		if !changed {
			return nil
		}
		want, err := b.egressPolicyFor(id, allow, pins, now)
		if err != nil {
			return err
		}
		if isCut {
			want.Annotations[AnnotationCut] = "true"
			want.Spec.Egress = nil
		}
		cur.Annotations = want.Annotations
		cur.Spec = want.Spec
		_, err = api.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// writeRules rewrites sb's policy from its record's rules, without a
// quarantine's cut; pins of names no rule allows any more go.
func (b *Backend) writeRules(ctx context.Context, sb *sandbox.Sandbox) error {
	rules, err := egressrule.ParseAll(sb.Spec.Allow)
	if err != nil {
		return errdefs.Invalid("%v", err)
	}
	uncut := false
	err = b.updatePolicyCut(ctx, sb.ID, &uncut, func(allow *[]string, pins network.Pins, now time.Time) (bool, error) {
		*allow = slices.Clone(sb.Spec.Allow)
		keepPins(pins, rules, now)
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("network policy of %s: %w", sb.ID, err)
	}
	return nil
}

// SetRules applies sb's rules now (cut=false), or a quarantine's cut: a
// policy that allows no egress (mode none's is one already). A cut needs
// the freeze only the gVisor class has (freeze.go); its release restores
// the rules, or for mode none leaves the deny-all policy as it is.
func (b *Backend) SetRules(ctx context.Context, sb *sandbox.Sandbox, cut bool) error {
	if cut && !b.freezable(sb) {
		return notOnKube("quarantine", whyFreeze)
	}
	if sb.Spec.Network != "egress" {
		if b.freezable(sb) {
			return b.ensurePolicy(ctx, sb.ID)
		}
		return errdefs.Invalid("sandbox %s has network mode %s", sb.ID, sb.Spec.Network)
	}
	if cut {
		yes := true
		err := b.updatePolicyCut(ctx, sb.ID, &yes, func(*[]string, network.Pins, time.Time) (bool, error) { return false, nil })
		if err != nil {
			return fmt.Errorf("network policy of %s: %w", sb.ID, err)
		}
		return nil
	}
	if !b.egressOn() {
		return notOnKube("egress rules", whyNoResolver)
	}
	return b.writeRules(ctx, sb)
}

// Allocate gives no addresses: a pod's address is its network plugin's,
// and nothing berth does depends on knowing it before the pod runs (the
// resolver and agent read it from the pod).
func (b *Backend) Allocate(ctx context.Context, id string, used func(string) bool) (string, string, error) {
	if !b.egressOn() {
		return "", "", notOnKube("network mode egress", whyNoResolver)
	}
	return "", "", nil
}

// whyEgressProxy: secrets injected at egress (node.EgressProxy) need
// berth's egress proxy on the sandbox's path (a redirect of its
// connections), which a NetworkPolicy cannot express; not built for pods.
const whyEgressProxy = "they need berth's egress proxy on the sandbox's path, and a NetworkPolicy can allow or deny but not redirect a pod's connections"

// egressDNS makes berth's resolver the only nameserver of an egress pod.
func (b *Backend) egressDNS(sb *sandbox.Sandbox, spec *corev1.PodSpec) {
	if sb.Spec.Network != "egress" || !b.egressOn() {
		return
	}
	one := "1"
	spec.DNSPolicy = corev1.DNSNone
	spec.DNSConfig = &corev1.PodDNSConfig{
		Nameservers: []string{b.cfg.Resolver.Address.String()},
		Searches:    []string{},
		Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: &one}},
	}
}

// expirePins drops expired pins from every egress policy (the cache says
// which have some; the write goes through the API). The node lease's
// holder runs it from Tick.
func (b *Backend) expirePins(ctx context.Context) {
	if b.policies == nil {
		return
	}
	list, err := b.policies.NetworkPolicies(b.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return
	}
	now := time.Now()
	for _, p := range list {
		_, pins, ok, err := policyState(p)
		if err != nil || !ok {
			continue
		}
		expired := false
		for _, t := range pins {
			if !t.After(now) {
				expired = true
				break
			}
		}
		id := p.Labels[LabelSandbox]
		if !expired || id == "" {
			continue
		}
		err = b.updatePolicy(ctx, id, func(allow *[]string, pins network.Pins, now time.Time) (bool, error) {
			return pins.Prune(now, nil), nil
		})
		if err != nil && !apierrors.IsNotFound(err) {
			b.log.Warn("expiring pins", "sandbox", id, "err", err)
		}
	}
}

// ParseResolverPeer reads "NAMESPACE/KEY=VALUE[,KEY=VALUE]": the pods
// with those labels in that namespace (berth's own, which serve the
// resolver behind its Service).
func ParseResolverPeer(s string) (networkingv1.NetworkPolicyPeer, error) {
	ns, sel, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok || !dnsLabel(ns) || sel == "" {
		return networkingv1.NetworkPolicyPeer{}, fmt.Errorf("%q is not NAMESPACE/KEY=VALUE[,KEY=VALUE]", s)
	}
	set, err := labels.ConvertSelectorToLabelsMap(sel)
	if err != nil || len(set) == 0 {
		return networkingv1.NetworkPolicyPeer{}, fmt.Errorf("%q: labels %q: %v", s, sel, err)
	}
	for k, v := range set {
		if k == "" || !labelValue(v) {
			return networkingv1.NetworkPolicyPeer{}, fmt.Errorf("%q: label %s=%s", s, k, v)
		}
	}
	return networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: set},
	}, nil
}
