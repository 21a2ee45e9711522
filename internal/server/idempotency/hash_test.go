package idempotency

import (
	"net/http/httptest"
	"testing"
)

// A create's registry account is left out of the request hash kept with
// its key: the hash must not test guesses of the password, and the
// account is no part of what the request makes. Everything else counts.
func TestRequestHashLeavesOutRegistryAuth(t *testing.T) {
	r := httptest.NewRequest("POST", "/v1/sandboxes", nil)
	a := RequestHash(r, []byte(`{"image":"reg/x:1","registry_auth":{"username":"u","password":"one"}}`))
	b := RequestHash(r, []byte(`{"registry_auth":{"username":"u","password":"two"},"image":"reg/x:1"}`))
	c := RequestHash(r, []byte(`{"image":"reg/x:1"}`))
	d := RequestHash(r, []byte(`{"image":"reg/y:1","registry_auth":{"username":"u","password":"one"}}`))
	if a != b || a != c {
		t.Fatalf("hashes differ by the registry account: %s %s %s", a, b, c)
	}
	if a == d {
		t.Fatal("hashes of two images are equal")
	}
}
