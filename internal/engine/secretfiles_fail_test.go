package engine_test

import (
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/secrets"
	"github.com/berth-sh/berth/internal/secrets/vault"
)

// A create whose secret files cannot be written fails, and leaves a
// failed tombstone and nothing on the node: it used to answer success
// with the files missing (the transition dropped the delivery's error).
// memnode's /run/secrets is no tmpfs, so its agent refuses every write:
// the failure is real here, not injected.
func TestCreateFailsWithoutItsSecretFiles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k, _ := secrets.NewKey()
	kr, _ := secrets.NewKeyring(k)
	v := vault.New(e.Store, kr)
	e.Engine.SetSecrets(v)
	if _, _, err := v.Put(e.Ctx, "t1", "TOKEN", []byte("tok-9d1e")); err != nil {
		t.Fatal(err)
	}
	sb, err := e.CreateAs("t1", engine.CreateRequest{Name: "files",
		Secrets: []sandbox.SecretRef{{Name: "TOKEN", File: "/run/secrets/tok"}}})
	if err == nil {
		t.Fatalf("create answered %s although its secret files were not written", sb.State)
	}
	if !strings.Contains(err.Error(), "secret files not delivered") {
		t.Fatalf("create error does not say why: %v", err)
	}
	if ids := e.Live(); len(ids) != 0 {
		t.Fatalf("live after the failed create: %v", ids)
	}
	tomb := e.tombstones()
	if len(tomb) != 1 || !strings.Contains(tomb[0].Error, "/run/secrets") {
		if len(tomb) == 1 {
			t.Fatalf("tombstone %s: error %q", tomb[0].State, tomb[0].Error)
		}
		t.Fatalf("%d tombstones", len(tomb))
	}
	if s, ok := e.Node.Get(tomb[0].ID); ok {
		t.Fatalf("node still holds the failed sandbox: %+v", s)
	}
	// An env-only reference needs no files: that create still works.
	if _, err := e.CreateAs("t1", engine.CreateRequest{Secrets: []sandbox.SecretRef{{Name: "TOKEN", Env: "T"}}}); err != nil {
		t.Fatal(err)
	}
	e.Healthy()
}
