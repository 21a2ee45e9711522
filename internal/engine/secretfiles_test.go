package engine

import (
	"errors"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
)

func TestCheckFileRef(t *testing.T) {
	files := map[string]bool{}
	for _, r := range []sandbox.SecretRef{{Name: "A", File: "/run/secrets/a"}, {Name: "A", File: "/run/secrets/d/b"}} {
		if err := checkFileRef(r, files); err != nil {
			t.Fatalf("%v: %v", r, err)
		}
	}
	for _, r := range []sandbox.SecretRef{
		{Name: "B", File: "/run/secrets/a"},   // twice
		{Name: "B", File: "/run/secrets/a/c"}, // under a file
		{Name: "B", File: "/run/secrets/d"},   // a directory of another
		{Name: "B", File: "/tmp/x"},           // outside
		{Name: "B", File: "/run/secrets/x", Env: "B"},
	} {
		if err := checkFileRef(r, files); !errors.Is(err, errdefs.ErrInvalid) {
			t.Fatalf("%v: %v, want invalid", r, err)
		}
	}
	sb := &sandbox.Sandbox{Spec: sandbox.Spec{Secrets: []sandbox.SecretRef{{Name: "A", File: "/run/secrets/a"}}}}
	if !HasSecretFiles(sb) || hasEnvSecrets(sb) {
		t.Fatal("a file-only sandbox")
	}
	sb.Spec.Secrets = append(sb.Spec.Secrets, sandbox.SecretRef{Name: "A", Env: "A"})
	if !hasEnvSecrets(sb) {
		t.Fatal("an env reference not seen")
	}
}
