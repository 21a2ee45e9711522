package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/berth-sh/berth/internal/network"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/node/kube"
)

// openKube opens the kubernetes backend from serve's flags.
func openKube(ctx context.Context, kc KubeConfig, log *slog.Logger) (node.Backend, error) {
	if kc.Namespace == "" {
		return nil, fmt.Errorf("--backend kubernetes needs --namespace")
	}
	if kc.CaptureGrace < 0 {
		return nil, fmt.Errorf("--kube-capture-grace %s: must not be negative", kc.CaptureGrace)
	}
	classes, err := ParseClassMap(kc.RuntimeClasses)
	if err != nil {
		return nil, err
	}
	images, err := parsePairs("--template-image", kc.TemplateImages)
	if err != nil {
		return nil, err
	}
	selector, err := parsePairs("--kube-node-selector", kc.NodeSelector)
	if err != nil {
		return nil, err
	}
	tolerations, err := ParseTolerations(kc.Tolerations)
	if err != nil {
		return nil, err
	}
	client, snaps, _, err := kube.NewClients(kc.Kubeconfig)
	if err != nil {
		return nil, err
	}
	switch corev1.PullPolicy(kc.PullPolicy) {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return nil, fmt.Errorf("--image-pull-policy %q: Always, IfNotPresent or Never", kc.PullPolicy)
	}
	resolver, err := kubeResolver(kc)
	if err != nil {
		return nil, err
	}
	return kube.New(ctx, kube.Config{
		Client: client, Namespace: kc.Namespace, Instance: kc.Instance, Classes: classes,
		AgentImage: kc.AgentImage, AgentImagePath: kc.AgentImagePath, Image: kc.Image, TemplateImages: images,
		PullPolicy: corev1.PullPolicy(kc.PullPolicy), StorageClass: kc.StorageClass, NodeName: kc.NodeName,
		Snapshots: snaps, SnapshotClass: kc.SnapshotClass, CaptureGrace: kc.CaptureGrace,
		NodeSelector: selector, Tolerations: tolerations, UserNamespaces: kc.UserNamespaces, Logger: log,
		Resolver: resolver, NodeAgent: kube.NodeAgentConfig{Port: kc.NodeAgentPort, Secret: kc.NodeAgentSecret},
	})
}

// kubeResolver reads the --kube-resolver-* flags.
func kubeResolver(kc KubeConfig) (kube.ResolverConfig, error) {
	var rc kube.ResolverConfig
	if kc.ResolverAddress == "" {
		if kc.ResolverListen != "" || len(kc.ResolverUpstream) > 0 || len(kc.ResolverPeers) > 0 {
			return rc, fmt.Errorf("--kube-resolver-* flags need --kube-resolver-address (what egress pods are given as their nameserver)")
		}
		return rc, nil
	}
	a, err := netip.ParseAddr(kc.ResolverAddress)
	if err != nil {
		return rc, fmt.Errorf("--kube-resolver-address %q: %v", kc.ResolverAddress, err)
	}
	rc.Address, rc.Listen = a.Unmap(), kc.ResolverListen
	for _, s := range kc.ResolverUpstream {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return rc, fmt.Errorf("--kube-resolver-upstream %q: want ADDR:PORT, e.g. 10.96.0.10:53", s)
		}
		rc.Upstream = append(rc.Upstream, ap)
	}
	if len(rc.Upstream) == 0 && rc.Listen != "" {
		if rc.Upstream, err = network.ResolvConfServers("/etc/resolv.conf"); err != nil || len(rc.Upstream) == 0 {
			return rc, fmt.Errorf("--kube-resolver-listen without --kube-resolver-upstream and no nameserver in /etc/resolv.conf (%v)", err)
		}
	}
	for _, s := range kc.ResolverPeers {
		p, err := kube.ParseResolverPeer(s)
		if err != nil {
			return rc, fmt.Errorf("--kube-resolver-peer: %v", err)
		}
		rc.Peers = append(rc.Peers, p)
	}
	return rc, nil
}

// kubeNodeName is the node name the engine records for sandboxes of an
// installation on Kubernetes: the same for all its replicas.
func kubeNodeName(kc KubeConfig) string {
	inst := kc.Instance
	if inst == "" {
		inst = "berth"
	}
	return "k8s:" + kc.Namespace + "/" + inst
}

// ParseClassMap reads --runtime-class-map "runc=,runsc=gvisor": berth
// class = RuntimeClass (empty: the cluster's default handler), in order,
// the first the default. Empty: one class runc.
func ParseClassMap(s string) ([]kube.ClassMap, error) {
	pairs, order, err := pairsInOrder("--runtime-class-map", s)
	if err != nil {
		return nil, err
	}
	var out []kube.ClassMap
	for _, k := range order {
		out = append(out, kube.ClassMap{Name: k, RuntimeClass: pairs[k]})
	}
	return out, nil
}

// ParseTolerations reads --kube-toleration "key=value:NoSchedule,key:
// NoExecute": a key with a value matches it (Equal), without one any
// value (Exists); the effect is NoSchedule, PreferNoSchedule or NoExecute.
func ParseTolerations(s string) ([]corev1.Toleration, error) {
	var out []corev1.Toleration
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		kv, effect, ok := strings.Cut(p, ":")
		if !ok {
			return nil, fmt.Errorf("--kube-toleration: %q is not KEY[=VALUE]:EFFECT", p)
		}
		switch e := corev1.TaintEffect(effect); e {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			return nil, fmt.Errorf("--kube-toleration: effect %q is not NoSchedule, PreferNoSchedule or NoExecute", effect)
		}
		k, v, hasValue := strings.Cut(kv, "=")
		if k == "" {
			return nil, fmt.Errorf("--kube-toleration: %q has no key", p)
		}
		t := corev1.Toleration{Key: k, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffect(effect)}
		if hasValue {
			t.Operator, t.Value = corev1.TolerationOpEqual, v
		}
		out = append(out, t)
	}
	return out, nil
}

func parsePairs(flag, s string) (map[string]string, error) {
	m, _, err := pairsInOrder(flag, s)
	return m, err
}

func pairsInOrder(flag, s string) (map[string]string, []string, error) {
	m := map[string]string{}
	var order []string
	if strings.TrimSpace(s) == "" {
		return m, nil, nil
	}
	for _, p := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || k == "" {
			return nil, nil, fmt.Errorf("%s: %q is not NAME=VALUE", flag, p)
		}
		if _, dup := m[k]; dup {
			return nil, nil, fmt.Errorf("%s: %s named twice", flag, k)
		}
		m[k] = v
		order = append(order, k)
	}
	return m, order, nil
}
