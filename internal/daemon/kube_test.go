package daemon

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/berth-sh/berth/internal/node/kube"
)

func TestParseClassMap(t *testing.T) {
	got, err := ParseClassMap("runc=, runsc=gvisor,kata=kata-qemu")
	want := []kube.ClassMap{{Name: "runc"}, {Name: "runsc", RuntimeClass: "gvisor"}, {Name: "kata", RuntimeClass: "kata-qemu"}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("ParseClassMap = %+v, %v", got, err)
	}
	if got, err := ParseClassMap(""); err != nil || len(got) != 0 {
		t.Errorf("empty map = %+v, %v (the backend's default applies)", got, err)
	}
	for _, bad := range []string{"runc", "=gvisor", "runc=,runc=gvisor"} {
		if _, err := ParseClassMap(bad); err == nil {
			t.Errorf("ParseClassMap(%q) accepted", bad)
		}
	}
	if n := kubeNodeName(KubeConfig{Namespace: "sb"}); n != "k8s:sb/berth" {
		t.Errorf("kubeNodeName = %q", n)
	}
}

func TestParseTolerations(t *testing.T) {
	got, err := ParseTolerations("sandbox=gvisor:NoSchedule, dedicated:NoExecute")
	if err != nil || len(got) != 2 ||
		got[0] != (corev1.Toleration{Key: "sandbox", Operator: corev1.TolerationOpEqual, Value: "gvisor", Effect: corev1.TaintEffectNoSchedule}) ||
		got[1] != (corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}) {
		t.Fatalf("ParseTolerations = %+v, %v", got, err)
	}
	for _, bad := range []string{"sandbox", "sandbox:Sometimes", "=v:NoSchedule", ":NoSchedule"} {
		if _, err := ParseTolerations(bad); err == nil {
			t.Errorf("ParseTolerations(%q) accepted", bad)
		}
	}
}

// The --kube-resolver-* flags: off without an address (and refused if
// other resolver flags come without it); upstreams and peers parsed.
func TestKubeResolverFlags(t *testing.T) {
	rc, err := kubeResolver(KubeConfig{})
	if err != nil || rc.Address.IsValid() {
		t.Fatalf("no flags: %+v, %v", rc, err)
	}
	if _, err := kubeResolver(KubeConfig{ResolverListen: ":5353"}); err == nil {
		t.Error("--kube-resolver-listen without an address accepted")
	}
	rc, err = kubeResolver(KubeConfig{ResolverAddress: "10.96.0.53", ResolverListen: ":5353",
		ResolverUpstream: []string{"10.96.0.10:53"}, ResolverPeers: []string{"berth/app.kubernetes.io/name=berth"}})
	if err != nil || rc.Address.String() != "10.96.0.53" || rc.Listen != ":5353" || len(rc.Upstream) != 1 ||
		rc.Upstream[0].String() != "10.96.0.10:53" || len(rc.Peers) != 1 {
		t.Fatalf("flags: %+v, %v", rc, err)
	}
	for _, bad := range []KubeConfig{
		{ResolverAddress: "not-an-ip"},
		{ResolverAddress: "10.96.0.53", ResolverUpstream: []string{"10.96.0.10"}},
		{ResolverAddress: "10.96.0.53", ResolverPeers: []string{"nolabels"}},
	} {
		if _, err := kubeResolver(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// A negative capture grace is refused before anything talks to a cluster.
func TestKubeCaptureGraceFlag(t *testing.T) {
	_, err := openKube(context.Background(), KubeConfig{Namespace: "sb", CaptureGrace: -time.Second}, slog.Default())
	if err == nil || !strings.Contains(err.Error(), "--kube-capture-grace") {
		t.Fatalf("negative grace: %v", err)
	}
}
