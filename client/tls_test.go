package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func tlsServer(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"version":"t","go":"go","runtime":"runc"}`))
	}))
	t.Cleanup(srv.Close)
	return srv, FingerprintOf(srv.Certificate().Raw)
}

// TestTLSPin: a pinned client reaches a self-signed server; a wrong pin
// (one bit off) refuses before any request is sent; no pin at all fails
// chain verification.
func TestTLSPin(t *testing.T) {
	srv, fp := tlsServer(t)
	ctx := context.Background()
	c, err := New(srv.URL, "", WithTLSFingerprint(fp))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c.Version(ctx); err != nil || v.Version != "t" {
		t.Fatalf("pinned: %v %+v", err, v)
	}
	// Upper case and colon-separated pins are the same pin.
	sum := sha256.Sum256(srv.Certificate().Raw)
	var parts []string
	for _, b := range sum {
		parts = append(parts, strings.ToUpper(hex.EncodeToString([]byte{b})))
	}
	c2, err := New(srv.URL, "", WithTLSFingerprint("SHA256:"+strings.Join(parts, ":")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Version(ctx); err != nil {
		t.Fatalf("colon form: %v", err)
	}
	sum[31] ^= 1
	bad, err := New(srv.URL, "", WithTLSFingerprint("sha256:"+hex.EncodeToString(sum[:])))
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.Version(ctx)
	var fe *FingerprintError
	if !errors.As(err, &fe) || fe.Got != fp {
		t.Fatalf("wrong pin: %v", err)
	}
	none, _ := New(srv.URL, "")
	if _, err := none.Version(ctx); err == nil {
		t.Fatal("an unpinned client trusted a self-signed certificate")
	}
	if _, err := New(srv.URL, "", WithTLSFingerprint("sha256:abc")); err == nil {
		t.Fatal("a malformed pin was accepted")
	}
	if _, err := New("http://127.0.0.1:1", "", WithTLSFingerprint(fp)); err == nil {
		t.Fatal("a pin on an http:// host was accepted (it would never be checked)")
	}
}

// TestTLSCAFile: the server's certificate verifies against a CA file.
func TestTLSCAFile(t *testing.T) {
	srv, _ := tlsServer(t)
	f := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := New(srv.URL, "", WithTLSCAFile(f))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Version(context.Background()); err != nil {
		t.Fatalf("with the CA file: %v", err)
	}
	empty := filepath.Join(t.TempDir(), "empty.pem")
	os.WriteFile(empty, []byte("nothing"), 0o600)
	if _, err := New(srv.URL, "", WithTLSCAFile(empty)); err == nil {
		t.Fatal("a CA file without certificates was accepted")
	}
}

// FuzzParseFingerprint: whatever is accepted is 32 bytes that print back
// to an accepted pin of the same bytes; nothing panics.
func FuzzParseFingerprint(f *testing.F) {
	for _, s := range []string{"sha256:" + strings.Repeat("ab", 32), "SHA256:" + strings.Repeat("AB:", 31) + "AB",
		"sha256:", "sha256:zz", "md5:00", "sha256:" + strings.Repeat("a", 63), "sha256:" + strings.Repeat(":", 31)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseFingerprint(s)
		if err != nil {
			return
		}
		canon := "sha256:" + hex.EncodeToString(b[:])
		b2, err := ParseFingerprint(canon)
		if err != nil || b2 != b {
			t.Fatalf("%q accepted as %s, which does not parse back: %v", s, canon, err)
		}
		if !strings.EqualFold(strings.ReplaceAll(s, ":", ""), strings.ReplaceAll(canon, ":", "")) {
			t.Fatalf("%q accepted as %s", s, canon)
		}
	})
}

// FuzzParseRetryAfter: accepted values are whole seconds within a day and
// are exactly the digits given.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"1", "0", " 30 ", "86400", "86401", "-1", "+1", "1.5", "Wed, 21 Oct 2015 07:28:00 GMT", "999999", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := ParseRetryAfter(s)
		if !ok {
			if d != 0 {
				t.Fatalf("%q refused with %v", s, d)
			}
			return
		}
		if d < 0 || d > maxRetryAfter || d%time.Second != 0 {
			t.Fatalf("%q accepted as %v", s, d)
		}
		if got := strings.TrimLeft(strings.TrimSpace(s), "0"); got != strings.TrimLeft(strconv.FormatInt(int64(d/time.Second), 10), "0") {
			t.Fatalf("%q accepted as %v", s, d)
		}
	})
}
