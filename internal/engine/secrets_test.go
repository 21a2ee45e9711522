package engine_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/secrets"
	"github.com/berth-sh/berth/internal/secrets/vault"
	"github.com/berth-sh/berth/internal/store"
)

// Secret references: checked against the creating tenant's secrets at
// create, stored as names only, resolved at every exec (a new value is
// seen, a removed secret is no longer given).
func TestSecretReferences(t *testing.T) {
	e := newEnv(t)
	ref := []sandbox.SecretRef{{Name: "TOKEN", Env: "GH_TOKEN"}}

	// No resolver installed: a create naming a secret is refused.
	if _, err := e.Engine.Create(e.Ctx, &engine.CreateRequest{Secrets: ref}, engine.CreateOptions{Actor: "test", Tenant: "t1"}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("create without a resolver: %v", err)
	}
	k, _ := secrets.NewKey()
	kr, _ := secrets.NewKeyring(k)
	v := vault.New(e.Store, kr)
	e.Engine.SetSecrets(v)

	// Missing for this tenant (another tenant's does not count): 400, nothing made.
	if _, _, err := v.Put(e.Ctx, "t2", "TOKEN", []byte("theirs")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Engine.Create(e.Ctx, &engine.CreateRequest{Secrets: ref}, engine.CreateOptions{Actor: "test", Tenant: "t1"}); !errors.Is(err, errdefs.ErrInvalid) ||
		!strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("create naming another tenant's secret: %v", err)
	}
	if sbs, _, err := e.Store.ListSandboxes(e.Ctx, store.SandboxFilter{Owner: store.AnyOwner, IncludeDeleted: true}, store.Page{}); err != nil || len(sbs) != 0 {
		t.Fatalf("a refused create left records: %d %v", len(sbs), err)
	}
	if _, err := e.Engine.Create(e.Ctx, &engine.CreateRequest{Secrets: []sandbox.SecretRef{{Name: "TOKEN"}, {Name: "OTHER", Env: "TOKEN"}}},
		engine.CreateOptions{Actor: "test", Tenant: "t2"}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("one env var twice: %v", err)
	}

	const v1, v2 = "value-one-8f3a", "value-two-77c1"
	if _, _, err := v.Put(e.Ctx, "t1", "TOKEN", []byte(v1)); err != nil {
		t.Fatal(err)
	}
	sb, err := e.Engine.Create(e.Ctx, &engine.CreateRequest{Secrets: ref}, engine.CreateOptions{Actor: "test", Tenant: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	show := func() string {
		t.Helper()
		exit, out, err := e.Exec(sb.ID, "sh", "-c", `printf %s "$GH_TOKEN"`)
		if err != nil || exit.Code != 0 {
			t.Fatalf("exec: %v %+v %s", err, exit, out)
		}
		return out
	}
	if got := show(); got != v1 {
		t.Fatalf("exec env: %q", got)
	}
	rec := e.Get(sb.ID)
	spec, _ := json.Marshal(rec.Spec)
	if strings.Contains(string(spec), v1) || len(rec.Spec.Secrets) != 1 || rec.Spec.Secrets[0] != ref[0] {
		t.Fatalf("stored spec: %s", spec)
	}
	evs, _, err := e.Store.ListEvents(e.Ctx, store.AnyOwner, sb.ID, 0, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if b, _ := json.Marshal(ev); strings.Contains(string(b), v1) {
			t.Fatalf("event holds the value: %s", b)
		}
	}
	if _, _, err := v.Put(e.Ctx, "t1", "TOKEN", []byte(v2)); err != nil {
		t.Fatal(err)
	}
	if got := show(); got != v2 {
		t.Fatalf("after replacing: %q", got)
	}
	if err := v.Delete(e.Ctx, "t1", "TOKEN"); err != nil {
		t.Fatal(err)
	}
	if got := show(); got != "" {
		t.Fatalf("after removing: %q", got)
	}
	// A resolver that cannot open (the key gone) fails the exec rather
	// than running it without the secret.
	if _, _, err := v.Put(e.Ctx, "t1", "TOKEN", []byte(v1)); err != nil {
		t.Fatal(err)
	}
	other, _ := secrets.NewKey()
	okr, _ := secrets.NewKeyring(other)
	v.SetKeyring(okr)
	if _, _, err := e.Exec(sb.ID, "true"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("exec with the key gone: %v", err)
	}
}
