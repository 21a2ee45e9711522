package input

import (
	"errors"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

func TestCheckSecretRefsFiles(t *testing.T) {
	ok := [][]api.SecretRef{
		{{Name: "A", File: "/run/secrets/a"}},
		{{Name: "A", File: "/run/secrets/a"}, {Name: "A"}},           // a file and an env var of one name
		{{Name: "A", File: "/run/secrets/a"}, {Name: "B", Env: "a"}}, // env a and file a do not clash
		{{Name: "A", File: "/run/secrets/x/a"}, {Name: "B", File: "/run/secrets/x/b"}},
	}
	for _, refs := range ok {
		if err := checkSecretRefs(refs); err != nil {
			t.Fatalf("%v: %v", refs, err)
		}
	}
	bad := [][]api.SecretRef{
		{{Name: "A", File: "/etc/a"}},
		{{Name: "A", File: "/run/secrets/../a"}},
		{{Name: "A", File: "/run/secrets/"}},
		{{Name: "A", File: "/run/secrets/a b"}},
		{{Name: "A", File: "/run/secrets/a", Env: "A"}},
		{{Name: "A", File: "/run/secrets/a"}, {Name: "B", File: "/run/secrets/a"}},
		{{Name: "A"}, {Name: "B", Env: "A"}},
	}
	for _, refs := range bad {
		if err := checkSecretRefs(refs); !errors.Is(err, errdefs.ErrInvalid) {
			t.Fatalf("%v: %v, want invalid", refs, err)
		}
	}
}

func TestCheckSecretRefsEgress(t *testing.T) {
	ok := [][]api.SecretRef{
		{{Name: "A", EgressHost: "api.example.test"}},
		{{Name: "A", EgressHost: "API.Example.test", Env: "GH"}},
		{{Name: "A", EgressHost: "a.test"}, {Name: "A", File: "/run/secrets/a"}},
	}
	for _, refs := range ok {
		if err := checkSecretRefs(refs); err != nil {
			t.Fatalf("%v: %v", refs, err)
		}
	}
	bad := [][]api.SecretRef{
		{{Name: "A", EgressHost: "a_b.test"}},
		{{Name: "A", EgressHost: "1.2.3.4:443"}},
		{{Name: "A", EgressHost: "a.test\n"}},
		{{Name: "A", EgressHost: "a.test", File: "/run/secrets/a"}},
		{{Name: "A", EgressHost: "a.test"}, {Name: "A"}}, // env var A twice
		{{Name: "A", EgressHost: "a.test", Env: "1X"}},
	}
	for _, refs := range bad {
		if err := checkSecretRefs(refs); !errors.Is(err, errdefs.ErrInvalid) {
			t.Fatalf("%v: %v, want invalid", refs, err)
		}
	}
}
