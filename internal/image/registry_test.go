package image

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/berth-sh/berth/internal/errdefs"
)

func resolveFor(t *testing.T, c *Credentials, reg string) authn.AuthConfig {
	t.Helper()
	r, err := name.NewRegistry(reg)
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Resolve(r)
	if err != nil {
		t.Fatal(err)
	}
	ac, err := a.Authorization()
	if err != nil {
		t.Fatal(err)
	}
	return *ac
}

func TestParseCredentials(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString([]byte("alice:pa:ss"))
	c, err := ParseCredentials([]byte(`{
		"auths": {
			"198.18.0.2:5000": {"auth": "` + b64 + `"},
			"https://Registry.Example:443/v1/": {"username": "bob", "password": "pw"},
			"https://index.docker.io/v1/": {"identitytoken": "refresh"},
			"tok.example": {"registrytoken": "bearer"}
		},
		"HttpHeaders": {"User-Agent": "x"}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := resolveFor(t, c, "198.18.0.2:5000"); got.Username != "alice" || got.Password != "pa:ss" {
		t.Fatalf("auth entry: %+v", got)
	}
	if got := resolveFor(t, c, "registry.example:443"); got.Username != "bob" || got.Password != "pw" {
		t.Fatalf("URL key: %+v", got)
	}
	if got := resolveFor(t, c, "index.docker.io"); got.IdentityToken != "refresh" {
		t.Fatalf("docker hub key: %+v", got)
	}
	if got := resolveFor(t, c, "tok.example"); got.RegistryToken != "bearer" {
		t.Fatalf("registry token: %+v", got)
	}
	// Another registry, or the same host on another port, gets nothing.
	for _, reg := range []string{"198.18.0.2:5001", "other.example"} {
		if got := resolveFor(t, c, reg); got != (authn.AuthConfig{}) {
			t.Fatalf("%s: %+v, want anonymous", reg, got)
		}
	}
	if got := strings.Join(c.Hosts(), ","); got != "198.18.0.2:5000,index.docker.io,registry.example:443,tok.example" {
		t.Fatalf("hosts %s", got)
	}

	for _, bad := range []string{
		`not json`,
		`{"auths": {"h": {}}}`,
		`{"auths": {"h": {"auth": "!!"}}}`,
		`{"auths": {"h": {"auth": "` + base64.StdEncoding.EncodeToString([]byte("nocolon")) + `"}}}`,
		`{"auths": {"": {"username": "a"}}}`,
		`{"auths": {"https://": {"username": "a"}}}`,
		`{"auths": {"bad host": {"username": "a"}}}`,
		`{"auths": {"h": {"username": "a"}, "https://h/v2/": {"username": "b"}}}`,
		`{"credsStore": "desktop"}`,
		`{"credHelpers": {"gcr.io": "gcloud"}}`,
		`{"auths": {"h": {"username": "a"}}, "x": "` + strings.Repeat("a", maxCredentialsFile) + `"}`,
	} {
		_, err := ParseCredentials([]byte(bad))
		if err == nil {
			t.Fatalf("%.60q: parsed", bad)
		}
		if code, _ := errdefs.Code(err); code != "invalid_argument" && code != "too_large" {
			t.Fatalf("%.60q: %v (%s)", bad, err, code)
		}
		// The message never echoes a secret.
		if strings.Contains(err.Error(), "nocolon") {
			t.Fatalf("error shows the secret: %v", err)
		}
	}
}

// FuzzParseCredentials: any input parses or is refused as bad input; what
// parses resolves for each host it lists.
func FuzzParseCredentials(f *testing.F) {
	f.Add([]byte(`{"auths": {"198.18.0.2:5000": {"auth": "YTpi"}}}`))
	f.Add([]byte(`{"auths": {"https://index.docker.io/v1/": {"username": "a", "password": "b"}}}`))
	f.Add([]byte(`{"auths": {"h": {"identitytoken": "t"}}, "credHelpers": {}}`))
	f.Add([]byte(`{"auths": null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCredentials(data)
		if err != nil {
			var e *errdefs.Error
			if !errors.As(err, &e) {
				t.Fatalf("uncategorised error %v", err)
			}
			return
		}
		for _, h := range c.Hosts() {
			r, err := name.NewRegistry(h)
			if err != nil {
				t.Fatalf("host %q does not parse: %v", h, err)
			}
			if a, err := c.Resolve(r); err != nil || a == authn.Anonymous {
				t.Fatalf("host %q resolves to %v, %v", h, a, err)
			}
		}
	})
}

// The registry answers the e2e suite cannot make its real registry give
// (test/e2e/registry_test.go has the rest) get their codes too.
func TestRegistryErrCodes(t *testing.T) {
	for _, tc := range []struct {
		err    error
		code   string
		status int
		cause  string
	}{
		{&transport.Error{StatusCode: 403, Errors: []transport.Diagnostic{{Code: transport.DeniedErrorCode, Message: "no\x1b[31m"}}},
			"registry_denied", 403, "denied access (403: DENIED no [31m)"},
		{&transport.Error{StatusCode: 503}, "registry_error", 502, "answered 503"},
		{&transport.Error{StatusCode: 415}, "image_unsupported", 400, "media type (415)"},
		{errors.New("something else"), "registry_error", 502, "something else"},
	} {
		err := registryErr("push", "198.18.0.2:5000/a:b", tc.err)
		code, status := errdefs.Code(err)
		msg := errdefs.Message(err)
		if code != tc.code || status != tc.status || !strings.HasPrefix(msg, "push 198.18.0.2:5000/a:b: ") || !strings.Contains(msg, tc.cause) {
			t.Errorf("%v: %s %d %q", tc.err, code, status, msg)
		}
	}
}
