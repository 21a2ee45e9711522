package local

import (
	"reflect"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/runtime"
)

func TestAPIIsolationCarriesEveryField(t *testing.T) {
	iso := runtime.Isolation{Runtime: "runc", SharedKernel: true, UserNamespace: true, Seccomp: "docker-default",
		Capabilities: []string{"CAP_CHOWN"}, NoNewPrivs: true, ReadonlyImage: true}
	want := api.Isolation{Runtime: "runc", SharedKernel: true, UserNamespace: true, Seccomp: "docker-default",
		Capabilities: []string{"CAP_CHOWN"}, NoNewPrivs: true, ReadonlyImage: true}
	if got := apiIsolation(iso); !reflect.DeepEqual(got, want) {
		t.Fatalf("apiIsolation = %+v, want %+v", got, want)
	}
}
