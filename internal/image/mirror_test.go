package image

import (
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
)

// TestHubMirror: Docker Hub's references, short or named, go to the
// mirror under the same repository path; others stay where they are.
func TestHubMirror(t *testing.T) {
	s := &Store{opts: options{hubMirror: "127.0.0.1:5000", hubMirrorPlain: true}}
	for _, c := range []struct{ in, want string }{
		{"ubuntu:22.04", "127.0.0.1:5000/library/ubuntu:22.04"},
		{"docker.io/library/ubuntu", "127.0.0.1:5000/library/ubuntu:latest"},
		{"e2bdev/base:1", "127.0.0.1:5000/e2bdev/base:1"},
		{"ubuntu@sha256:" + "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12", "127.0.0.1:5000/library/ubuntu@sha256:ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12"},
		{"ghcr.io/x/y:1", "ghcr.io/x/y:1"},
		{"registry.local:5000/a:b", "registry.local:5000/a:b"},
	} {
		r, err := name.ParseReference(c.in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.mirrored(r)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if got.Name() != c.want {
			t.Errorf("%s: %s, want %s", c.in, got.Name(), c.want)
		}
		if got.Context().Scheme() != "http" && got.Context().RegistryStr() == "127.0.0.1:5000" {
			t.Errorf("%s: the plain mirror's scheme is %s", c.in, got.Context().Scheme())
		}
	}
	if got, _ := (&Store{}).mirrored(name.MustParseReference("ubuntu")); got.Context().RegistryStr() != name.DefaultRegistry {
		t.Errorf("no mirror: %s", got.Name())
	}
	for _, c := range []struct {
		in    string
		host  string
		plain bool
		bad   bool
	}{
		{in: "mirror.local:5000", host: "mirror.local:5000"},
		{in: "http://127.0.0.1:5000/", host: "127.0.0.1:5000", plain: true},
		{in: "https://m.example", host: "m.example"},
		{in: "m.example/path", bad: true},
		{in: "", bad: true},
		{in: "u@m.example", bad: true},
	} {
		h, p, err := ParseMirror(c.in)
		if (err != nil) != c.bad || h != c.host || p != c.plain {
			t.Errorf("ParseMirror(%q) = %q %v %v", c.in, h, p, err)
		}
	}
}
