package secrets

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

func mustKey(t *testing.T) Key {
	t.Helper()
	k, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpenRoundTrip(t *testing.T) {
	kr, _ := NewKeyring(mustKey(t))
	val := []byte("hunter2-very-secret\n-----BEGIN KEY-----")
	s, err := kr.Seal("t1", "TOKEN", val)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(s.Ciphertext, val[:8]) || bytes.Contains(s.WrappedKey, val[:8]) || s.KeyID != kr.Primary().ID {
		t.Fatalf("sealed form carries the value or the wrong key id: %+v", s)
	}
	got, err := kr.Open("t1", "TOKEN", s)
	if err != nil || !bytes.Equal(got, val) {
		t.Fatalf("open: %q %v", got, err)
	}
	// Bound to tenant and name: a row moved elsewhere does not open.
	if _, err := kr.Open("t2", "TOKEN", s); err == nil {
		t.Fatal("opened under another tenant")
	}
	if _, err := kr.Open("t1", "OTHER", s); err == nil {
		t.Fatal("opened under another name")
	}
	// Tampering fails authentication, and the error does not carry the value.
	bad := s
	bad.Ciphertext = bytes.Clone(s.Ciphertext)
	bad.Ciphertext[0] ^= 1
	if _, err := kr.Open("t1", "TOKEN", bad); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("tampered: %v", err)
	}
	// Two seals of one value differ (fresh data key and nonces).
	s2, _ := kr.Seal("t1", "TOKEN", val)
	if bytes.Equal(s.Ciphertext, s2.Ciphertext) || bytes.Equal(s.WrappedKey, s2.WrappedKey) {
		t.Fatal("two seals are equal")
	}
	if _, err := kr.Seal("t1", "BIG", make([]byte, MaxValue+1)); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Fatalf("oversize: %v", err)
	}
}

func TestRotationByRewrap(t *testing.T) {
	oldK, newK := mustKey(t), mustKey(t)
	oldRing, _ := NewKeyring(oldK)
	s, err := oldRing.Seal("t", "A", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	// During rotation the daemon holds both: new first.
	both, _ := NewKeyring(newK, oldK)
	if v, err := both.Open("t", "A", s); err != nil || string(v) != "v1" {
		t.Fatalf("both keys, old form: %q %v", v, err)
	}
	r, changed, err := both.Rewrap(s)
	if err != nil || !changed || r.KeyID != newK.ID || !bytes.Equal(r.Ciphertext, s.Ciphertext) {
		t.Fatalf("rewrap: %+v %v %v", r, changed, err)
	}
	if _, again, _ := both.Rewrap(r); again {
		t.Fatal("re-wrapping a current secret changed it")
	}
	// The old key removed: the re-wrapped form opens, the old one does not.
	newRing, _ := NewKeyring(newK)
	if v, err := newRing.Open("t", "A", r); err != nil || string(v) != "v1" {
		t.Fatalf("new key only: %q %v", v, err)
	}
	if _, err := newRing.Open("t", "A", s); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("old form under new key only: %v", err)
	}
}

func TestParseKeysAndLoad(t *testing.T) {
	k1, k2 := mustKey(t), mustKey(t)
	keys, err := ParseKeys([]byte("# comment\n\n" + k1.Encode() + "\n  " + k2.Encode() + "  \n"))
	if err != nil || len(keys) != 2 || keys[0].ID != k1.ID || keys[1].ID != k2.ID {
		t.Fatalf("parse: %v %v", keys, err)
	}
	for _, bad := range []string{"", "# only\n", "notbase64!!\n", "AAAA\n"} {
		if _, err := ParseKeys([]byte(bad)); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("ParseKeys(%q) = %v", bad, err)
		}
	}
	dir := t.TempDir()
	noenv := func(string) string { return "" }
	kr, src, err := Load("", noenv, dir)
	if err != nil || src != GeneratedHere {
		t.Fatalf("first load: %v %v", src, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "secrets.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("generated key file: %v %v", fi, err)
	}
	kr2, src, err := Load("", noenv, dir)
	if err != nil || src != FromDataDir || kr2.Primary().ID != kr.Primary().ID {
		t.Fatalf("second load: %v %v", src, err)
	}
	env := func(n string) string {
		if n == EnvKey {
			return k1.Encode() + "," + k2.Encode()
		}
		return ""
	}
	kr3, src, err := Load("", env, dir)
	if err != nil || src != FromEnv || kr3.Primary().ID != k1.ID || len(kr3.IDs()) != 2 {
		t.Fatalf("env load: %v %v", src, err)
	}
	f := filepath.Join(dir, "k")
	if err := os.WriteFile(f, []byte(k2.Encode()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(f, env, dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable key file: %v", err)
	}
	_ = os.Chmod(f, 0o600)
	kr4, src, err := Load(f, env, dir)
	if err != nil || src != FromFile || kr4.Primary().ID != k2.ID {
		t.Fatalf("file load: %v %v", src, err)
	}
}

func TestParseRef(t *testing.T) {
	for in, want := range map[string]Ref{
		"TOKEN":                       {"TOKEN", Env, "TOKEN"},
		"TOKEN=env:GH_TOKEN":          {"TOKEN", Env, "GH_TOKEN"},
		"K=file:/run/secrets/k":       {"K", File, "/run/secrets/k"},
		"K=file:/run/secrets/a/b.pem": {"K", File, "/run/secrets/a/b.pem"},
		"API=egress:API.Example.test": {"API", Egress, "api.example.test"},
		"_x1=egress:localhost":        {"_x1", Egress, "localhost"},
	} {
		got, err := ParseRef(in)
		if err != nil || got != want {
			t.Errorf("ParseRef(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "=env:A", "1A", "A-B", "A=", "A=env:", "A=env:1X", "A=env", "A=tmp:x",
		"A=file:/etc/passwd", "A=file:/run/secrets/", "A=file:/run/secrets/../x", "A=file:/run/secrets//x",
		"A=file:/run/secrets/x y", "A=file:run/secrets/x", "A=egress:", "A=egress:-a.test", "A=egress:a..b",
		"A=egress:a_b.test", "A=egress:1.2.3.4:443", "A=egress:a.test\n", strings.Repeat("A", 129)} {
		if _, err := ParseRef(in); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("ParseRef(%q) = %v, want invalid", in, err)
		}
	}
}

func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"TOKEN", "A=env:B", "K=file:/run/secrets/k", "A=egress:api.test", "A=file:/run/secrets/../x",
		"A=egress:A.B", "A=x:y", "=", "A=env:B=C", "A=egress:a.test\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRef(s)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("non-invalid error %v", err)
			}
			return
		}
		// Accepted ⇒ canonical form reads back the same, and no byte
		// outside the safe set reached a target.
		back, err := ParseRef(r.String())
		if err != nil || back != r {
			t.Fatalf("%q → %+v → %q → %+v, %v", s, r, r.String(), back, err)
		}
		if CheckName(r.Name) != nil || strings.ContainsAny(r.Target, " \t\r\n\x00=:") && r.Kind != File {
			t.Fatalf("accepted unsafe %+v", r)
		}
		if r.Kind == File && (!strings.HasPrefix(r.Target, FileDir+"/") || strings.Contains(r.Target, "/../") || strings.HasSuffix(r.Target, "/..")) {
			t.Fatalf("file target escapes %s: %q", FileDir, r.Target)
		}
	})
}

func TestSubstitute(t *testing.T) {
	p1, p2 := NewPlaceholder(), NewPlaceholder()
	if !IsPlaceholder(p1) || p1 == p2 || IsPlaceholder(p1[:len(p1)-1]) || IsPlaceholder(strings.ToUpper(p1)) {
		t.Fatal("placeholder form")
	}
	vals := map[string]string{p1: "REAL1", p2: p1} // p2's value looks like p1: not expanded again
	for in, want := range map[string]string{
		"Bearer " + p1:               "Bearer REAL1",
		p1 + p1:                      "REAL1REAL1",
		"x" + p2 + "y":               "x" + p1 + "y",
		PlaceholderPrefix:            PlaceholderPrefix,
		PlaceholderPrefix + p1:       PlaceholderPrefix + "REAL1",
		p1[:len(p1)-1]:               p1[:len(p1)-1],
		"token " + NewPlaceholder():  "",
		"no placeholder here at all": "no placeholder here at all",
	} {
		got := Substitute(in, vals)
		if want == "" {
			if got != in {
				t.Errorf("unknown placeholder changed: %q", got)
			}
			continue
		}
		if got != want {
			t.Errorf("Substitute(%q) = %q, want %q", in, got, want)
		}
	}
	if !HeaderSafe("abc\tdef") || HeaderSafe("a\r\nX-Evil: 1") || HeaderSafe("a\x00") {
		t.Fatal("HeaderSafe")
	}
}

func FuzzSubstitute(f *testing.F) {
	p := "berth-secret-placeholder-0123456789abcdef0123456789abcdef"
	f.Add("Bearer "+p, "value")
	f.Add(p+p, p)
	f.Add("berth-secret-placeholder-", "x")
	f.Add("berth-secret-placeholder-berth-secret-placeholder-0123456789abcdef0123456789abcdef", "")
	f.Fuzz(func(t *testing.T, s, v string) {
		vals := map[string]string{p: v}
		got := Substitute(s, vals)
		if !strings.Contains(s, p) && got != s {
			t.Fatalf("changed a string without the placeholder: %q → %q", s, got)
		}
		// Every occurrence is replaced: with the value free of the
		// placeholder, none is left; and the output is exactly the
		// input with each occurrence replaced left to right.
		if !strings.Contains(v, p) && !strings.Contains(v, PlaceholderPrefix) && strings.Contains(got, p) {
			// A placeholder may straddle a value boundary only if the
			// value contributes to it; here it does not.
			t.Fatalf("placeholder left: %q → %q", s, got)
		}
		if want := strings.ReplaceAll(s, p, v); got != want {
			t.Fatalf("Substitute(%q) = %q, ReplaceAll gives %q", s, got, want)
		}
	})
}
