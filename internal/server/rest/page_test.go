package rest

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/identity"
	"github.com/berth-sh/berth/internal/store"
)

func TestPageOf(t *testing.T) {
	for _, tc := range []struct {
		query string
		want  store.Page
		bad   bool
	}{
		{"", store.Page{Limit: store.MaxPage}, false},
		{"limit=5", store.Page{Limit: 5}, false},
		{"limit=5&cursor=abc", store.Page{Limit: 5, Cursor: "abc"}, false},
		{"limit=100000", store.Page{Limit: store.MaxPage}, false},
		{"limit=0", store.Page{}, true},
		{"limit=-1", store.Page{}, true},
		{"limit=ten", store.Page{}, true},
		{"limit=1e3", store.Page{}, true},
	} {
		p, err := PageOf(httptest.NewRequest("GET", "/v1/sandboxes?"+tc.query, nil))
		if tc.bad {
			if code, status := errdefs.Code(err); !errors.Is(err, errdefs.ErrInvalid) || status != 400 || code != "invalid_argument" {
				t.Errorf("%q: err %v (%s %d), want 400 invalid_argument", tc.query, err, code, status)
			}
			continue
		}
		if err != nil || p != tc.want {
			t.Errorf("%q: %+v %v, want %+v", tc.query, p, err, tc.want)
		}
	}
}

// TestCallerOwner: the guard's principal becomes the caller the engine
// reads the owner from; the host admin (unix socket) reads for every
// tenant, an anonymous request (public port) carries no caller.
func TestCallerOwner(t *testing.T) {
	ctx := context.Background()
	if o := OwnerOf(WithCaller(ctx, auth.Admin)); o != store.AnyOwner {
		t.Errorf("the host admin reads for %v, want every tenant", o)
	}
	key := auth.Principal{Actor: "key:k1", KeyID: "k1", Tenant: "acme"}
	c, ok := identity.From(WithCaller(ctx, key))
	if !ok || c.Tenant != "acme" || c.KeyID != "k1" || c.Actor != "key:k1" {
		t.Errorf("key caller = %+v %v", c, ok)
	}
	if o := OwnerOf(WithCaller(ctx, key)); o != store.OwnedBy("acme") {
		t.Errorf("key reads for %v", o)
	}
	lease := auth.Principal{Actor: "lease:sb1", Sandbox: "sb1"}
	if c, _ := identity.From(WithCaller(ctx, lease)); c.Lease != "sb1" {
		t.Errorf("lease caller = %+v", c)
	}
	if _, ok := identity.From(WithCaller(ctx, auth.Anonymous)); ok {
		t.Error("an anonymous request carries a caller")
	}
}
