package runtime

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestBuildSpecSecretsTmpfs: a sandbox with file secrets gets a capped
// tmpfs at /run/secrets; one without gets none.
func TestBuildSpecSecretsTmpfs(t *testing.T) {
	s := testSpec()
	spec, err := BuildSpec(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range spec.Mounts {
		if m.Destination == SecretsDir {
			t.Fatalf("a sandbox without file secrets got %v", m)
		}
	}
	s.SecretsTmpfs = true
	if spec, err = BuildSpec(s); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(spec.Mounts, func(m specs.Mount) bool { return m.Destination == SecretsDir })
	if i < 0 {
		t.Fatal("no secrets tmpfs")
	}
	m := spec.Mounts[i]
	for _, o := range []string{"nosuid", "nodev", "noexec", "mode=755", "size=2097152", "nr_inodes=256"} {
		if m.Type != "tmpfs" || !slices.Contains(m.Options, o) {
			t.Fatalf("secrets mount %+v lacks %s", m, o)
		}
	}
}
