package daemon

import (
	corev1 "k8s.io/api/core/v1"
	"slices"
	"testing"

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
