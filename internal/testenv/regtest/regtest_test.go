package regtest

import (
	"errors"
	"io"
	"net/http"
	"os"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Each kind of registry takes a push and a pull with its account, refuses
// both without, and leaves no namespace behind.
func TestRegistry(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("regtest needs root (network namespaces)")
	}
	for _, tc := range []struct {
		name string
		auth Auth
	}{{"basic", Basic}, {"token", Token}} {
		t.Run(tc.name, func(t *testing.T) {
			var ns string
			t.Run("run", func(t *testing.T) {
				r := Start(t, tc.auth)
				ns = r.Netns
				ref, err := name.ParseReference(r.Addr + "/regtest/img:v1")
				if err != nil {
					t.Fatal(err)
				}
				img, err := random.Image(1024, 2)
				if err != nil {
					t.Fatal(err)
				}
				tr := r.Transport()
				defer tr.CloseIdleConnections()
				good := authn.FromConfig(authn.AuthConfig{Username: r.User, Password: r.Password})
				if err := remote.Write(ref, img, remote.WithTransport(tr), remote.WithAuth(good)); err != nil {
					t.Fatalf("push: %v\n%s", err, r.Log())
				}
				got, err := remote.Image(ref, remote.WithTransport(tr), remote.WithAuth(good))
				if err != nil {
					t.Fatal(err)
				}
				want, _ := img.Digest()
				if d, _ := got.Digest(); d != want {
					t.Fatalf("pulled %s, pushed %s", d, want)
				}
				// BlobGets counts the fetches of a blob, and only those.
				layers, err := got.Layers()
				if err != nil {
					t.Fatal(err)
				}
				ld, _ := layers[0].Digest()
				if n := r.BlobGets(ld.String()); n != 0 {
					t.Fatalf("BlobGets before any read = %d", n)
				}
				rc, err := layers[0].Compressed()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, rc); err != nil {
					t.Fatal(err)
				}
				rc.Close()
				if n := r.BlobGets(ld.String()); n != 1 {
					t.Fatalf("BlobGets after one read = %d, want 1\n%s", n, r.Log())
				}
				bad := authn.FromConfig(authn.AuthConfig{Username: r.User, Password: "wrong"})
				for _, a := range []authn.Authenticator{authn.Anonymous, bad} {
					_, err = remote.Image(ref, remote.WithTransport(tr), remote.WithAuth(a))
					var terr *transport.Error
					if !errors.As(err, &terr) || terr.StatusCode != http.StatusUnauthorized {
						t.Fatalf("pull with %v: %v, want a 401", a, err)
					}
				}
			})
			if _, err := os.Stat(netnsPath(ns)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("namespace %s left behind: %v", ns, err)
			}
		})
	}
}
