package identity

import (
	"context"
	"testing"
)

func TestWithFrom(t *testing.T) {
	if _, ok := From(context.Background()); ok {
		t.Fatal("a bare context has a caller")
	}
	c := Caller{Tenant: "acme", Actor: "key:k1", KeyID: "k1"}
	got, ok := From(With(context.Background(), c))
	if !ok || got != c {
		t.Fatalf("From(With(c)) = %+v %v", got, ok)
	}
	// The default tenant is a caller too, not the absence of one.
	if got, ok := From(With(context.Background(), Caller{Actor: "local"})); !ok || got.Tenant != "" {
		t.Fatalf("default tenant caller = %+v %v", got, ok)
	}
}
