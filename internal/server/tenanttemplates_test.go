package server

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/store"
)

// TestTenantTemplateReads: a tenant's own template is read and listed by
// that tenant only (another tenant and the host get 404 by name and do not
// list it); it shadows the shared one of its name for its owner alone;
// creates resolve the same way.
func TestTenantTemplateReads(t *testing.T) {
	e := newTenv(t)
	e.tenant("a")
	e.tenant("b")
	ka := e.key("local", "a", "admin").Key
	kb := e.key("local", "b", "admin").Key
	ctx := context.Background()
	const bLayer = "sha256:00000000000000000000000000000000000000000000000000000000000000b1"
	for _, name := range []string{"btpl", "base"} {
		if err := e.st.PutTemplate(ctx, &store.Template{Tenant: "b", Name: name, Source: "b-own", Layers: []string{bLayer}}); err != nil {
			t.Fatal(err)
		}
	}
	var got api.Template
	e.must(kb, "GET", "/v1/templates/btpl", "", 200, &got)
	if got.Source != "b-own" {
		t.Errorf("b's btpl = %+v", got)
	}
	e.must(kb, "GET", "/v1/templates/base", "", 200, &got)
	if got.Source != "b-own" {
		t.Errorf("b's base = %+v, want its own (shadowing the shared one)", got)
	}
	e.must(ka, "GET", "/v1/templates/base", "", 200, &got)
	if got.Source != "test" {
		t.Errorf("a's base = %+v, want the shared one", got)
	}
	for _, cred := range []string{ka, "local"} {
		if code, body := e.do(cred, "GET", "/v1/templates/btpl", ""); code != 404 || strings.Contains(body, "b-own") {
			t.Errorf("GET b's btpl as %s: %d %s, want 404", cred, code, body)
		}
		if code, body := e.do(cred, "DELETE", "/v1/templates/btpl", ""); code != 404 && code != 403 {
			t.Errorf("DELETE b's btpl as %s: %d %s", cred, code, body)
		}
	}
	list := func(cred string) []string {
		var ts []api.Template
		e.must(cred, "GET", "/v1/templates", "", 200, &ts)
		var out []string
		for _, x := range ts {
			out = append(out, x.Name+":"+x.Source)
		}
		return out
	}
	if l := list(kb); !slices.Equal(l, []string{"base:b-own", "btpl:b-own"}) {
		t.Errorf("b lists %v", l)
	}
	for _, cred := range []string{ka, "local"} {
		if l := list(cred); !slices.Equal(l, []string{"base:test"}) {
			t.Errorf("%s lists %v", cred, l)
		}
	}
	// Creates: a cannot use b's template; b's base is its own.
	if code, body := e.do(ka, "POST", "/v1/sandboxes", `{"template":"btpl"}`); code != 404 {
		t.Errorf("a creates from b's btpl: %d %s, want 404", code, body)
	}
	sb := e.sandbox(kb, `{"template":"base"}`)
	if st, err := e.st.GetSandbox(ctx, store.AnyOwner, sb.ID); err != nil {
		t.Error(err)
	} else if !slices.Equal(st.Spec.Layers, []string{bLayer}) {
		t.Errorf("b's sandbox of base has layers %v, want b's own", st.Spec.Layers)
	}
	// b's templates are still there.
	for _, name := range []string{"btpl", "base"} {
		if _, err := e.st.GetTenantTemplate(ctx, "b", name); err != nil {
			t.Errorf("b's %s: %v", name, err)
		}
	}
}
