package daemon

import (
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
