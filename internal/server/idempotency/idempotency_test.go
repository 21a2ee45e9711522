package idempotency

import (
	"net/http"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

// FuzzParseKey: a key is accepted exactly when it is 1..255
// printable ASCII bytes, and then as given; anything else is a 400 with
// the stable code.
func FuzzParseKey(f *testing.F) {
	for _, seed := range []string{"", "a", "0f8fad5b-d9cb-469f-a165-70867728950e", strings.Repeat("k", 255),
		strings.Repeat("k", 256), "sp ace", "tab\t", "nul\x00", "del\x7f", "caf\xc3\xa9", "\xff", "~!@#$%^&*()"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, ok, err := ParseKey(http.Header{Header: {v}})
		valid := len(v) >= 1 && len(v) <= MaxKey
		for i := 0; i < len(v); i++ {
			valid = valid && v[i] >= 0x20 && v[i] <= 0x7e
		}
		if valid != (err == nil) || ok != valid {
			t.Fatalf("%q: ok=%v err=%v, valid=%v", v, ok, err, valid)
		}
		if err != nil {
			if code, status := errdefs.Code(err); code != "invalid_idempotency_key" || status != 400 {
				t.Fatalf("%q: %s %d", v, code, status)
			}
			return
		}
		if key != v {
			t.Fatalf("key %q parsed as %q", v, key)
		}
	})
}
