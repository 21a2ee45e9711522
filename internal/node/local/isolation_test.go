package local

import (
	"reflect"
	"testing"

	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/runtime"
)

func TestNodeIsolationCarriesEveryField(t *testing.T) {
	iso := runtime.Isolation{Runtime: "runc", SharedKernel: true, UserNamespace: true, Seccomp: "docker-default",
		Capabilities: []string{"CAP_CHOWN"}, NoNewPrivs: true, ReadonlyImage: true}
	want := node.Isolation{Runtime: "runc", SharedKernel: true, UserNamespace: true, Seccomp: "docker-default",
		Capabilities: []string{"CAP_CHOWN"}, NoNewPrivs: true, ReadonlyImage: true}
	if got := nodeIsolation(iso); !reflect.DeepEqual(got, want) {
		t.Fatalf("nodeIsolation = %+v, want %+v", got, want)
	}
}
