package e2b

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// TestSignatureMatchesSDK: the door's signature is the one the e2b SDK's
// getSignature makes (vectors printed by e2b 2.51.0's getSignature).
func TestSignatureMatchesSDK(t *testing.T) {
	for _, c := range []struct{ path, op, user, token, exp, want string }{
		{"hello.txt", "read", "", "tok", "", "v1_dEkXrS/Y6p/Op9rMpEpzXeRJ5bBL0LYkjrRJr9/Zz44"},
		{"/a b", "write", "root", "berth_lease_x", "1796640702", "v1_w3JNx+kilzKJUNKX5LtqVgsUg+ZA5nrFCmwd8rSoyTs"},
	} {
		if got := signature(c.path, c.op, c.user, c.token, c.exp); got != c.want {
			t.Errorf("signature(%q, %q, %q, %q, %q) = %s, want %s", c.path, c.op, c.user, c.token, c.exp, got, c.want)
		}
	}
}

// TestSignedExpiry: no expiry passes; a past one is refused as expired,
// a malformed or non-canonical one as invalid, a repeated one too.
func TestSignedExpiry(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	for _, c := range []struct {
		q    string
		want error
	}{
		{"", nil},
		{"signature_expiration=1000000", nil},
		{"signature_expiration=999999", errdefs.ErrUnauthenticated},
		{"signature_expiration=-5", errdefs.ErrUnauthenticated},
		{"signature_expiration=01000001", errdefs.ErrInvalid},
		{"signature_expiration=%2B1000001", errdefs.ErrInvalid},
		{"signature_expiration=1e9", errdefs.ErrInvalid},
		{"signature_expiration=99999999999999999999", errdefs.ErrInvalid},
		{"signature_expiration=2000000&signature_expiration=2000001", errdefs.ErrInvalid},
	} {
		q, _ := url.ParseQuery(c.q)
		_, err := signedExpiry(q, now)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: %v, want %v", c.q, err, c.want)
		}
	}
}

// TestMetadataOf: X-Metadata-* headers become user.e2b.* xattrs, keys
// lower-cased; a bad key or value, a repeated key, too many or too much
// is refused.
func TestMetadataOf(t *testing.T) {
	h := http.Header{}
	h.Set("X-Metadata-Author", "mish")
	h.Set("x-metadata-purpose", "upload it")
	h.Set("Content-Type", "text/plain")
	x, err := metadataOf(h)
	if err != nil || len(x) != 2 || x["user.e2b.author"] != "mish" || x["user.e2b.purpose"] != "upload it" {
		t.Fatalf("metadataOf: %v %v", x, err)
	}
	if x, err := metadataOf(http.Header{"Accept": {"x"}}); err != nil || x != nil {
		t.Fatalf("no metadata: %v %v", x, err)
	}
	many := http.Header{}
	for i := range 40 {
		many.Set("X-Metadata-K"+strings.Repeat("k", i), "v")
	}
	for _, bad := range []http.Header{
		{"X-Metadata-A": {"bad\nvalue"}},
		{"X-Metadata-A": {"\x7f"}},
		{"X-Metadata-A": {"é"}},
		{"X-Metadata-A B": {"v"}},
		{"X-Metadata-A": {"1", "2"}},
		{"X-Metadata-A": {strings.Repeat("v", 9000)}},
		{"X-Metadata-" + strings.Repeat("k", 250): {"v"}},
		many,
	} {
		if _, err := metadataOf(bad); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%v: %v, want invalid", bad, err)
		}
	}
}

func FuzzMetadataOf(f *testing.F) {
	f.Add("Author", "mish")
	f.Add("a b", "x\ny")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, k, v string) {
		x, err := metadataOf(http.Header{"X-Metadata-" + k: {v}})
		if err != nil {
			return
		}
		for name, val := range x {
			if !strings.HasPrefix(name, metadataXattr) || strings.ToLower(name) != name || len(name) > 255 {
				t.Fatalf("accepted name %q", name)
			}
			for i := range len(val) {
				if val[i] < 0x20 || val[i] > 0x7e {
					t.Fatalf("accepted value %q", val)
				}
			}
		}
	})
}

func FuzzSignedExpiry(f *testing.F) {
	f.Add("signature_expiration=1000000")
	f.Add("signature_expiration=01")
	f.Add("signature_expiration=&signature_expiration=")
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		exp, err := signedExpiry(q, time.Unix(1_000_000, 0))
		if err == nil && exp != "" && exp < "1000000" && len(exp) <= 7 {
			t.Fatalf("accepted past expiry %q", exp)
		}
	})
}
