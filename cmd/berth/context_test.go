package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// isolateConfig points the CLI at an empty config directory and clears the
// BERTH_* variables the test's environment may carry.
func isolateConfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	for _, v := range []string{"BERTH_HOST", "BERTH_API_KEY", contextEnv, client.TLSFingerprintEnv} {
		t.Setenv(v, "")
	}
	return filepath.Join(dir, "berth", configFileName)
}

// runBare runs the CLI without runCLI's --host.
func runBare(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetIn(strings.NewReader(stdin))
	code := execute(context.Background(), root, args, &errb)
	return out.String(), errb.String(), code
}

const testPin = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestConfigRoundTrip(t *testing.T) {
	path := isolateConfig(t)
	cfg := &cliConfig{Current: "prod", Contexts: map[string]*contextDef{
		"prod":  {Host: "https://berth.example:8443", APIKeyFile: "/etc/berth/prod.key", TLSFingerprint: testPin},
		"local": {Host: "unix:///run/berth/berth.sock"},
		"ci":    {Host: "http://127.0.0.1:7000", APIKey: "k-ci"},
		"ca":    {Host: "https://b.example", TLSCA: "/etc/ssl/b.pem"},
	}}
	if err := saveConfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	got, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, cfg) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, cfg)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("config mode %v, want 0600", st.Mode().Perm())
	}
	dst, _ := os.Stat(filepath.Dir(path))
	if dst.Mode().Perm() != 0o700 {
		t.Errorf("config dir mode %v, want 0700", dst.Mode().Perm())
	}
	// A rewrite replaces the file (no temporaries left beside it) and
	// keeps 0600 even if someone widened the old one.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Current = ""
	if err := saveConfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 || ents[0].Name() != configFileName {
		t.Errorf("config dir holds %v, want only %s", ents, configFileName)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("rewritten config mode %v, want 0600", st.Mode().Perm())
	}
	if got, err := loadConfig(path); err != nil || got.Current != "" {
		t.Errorf("after rewrite: %+v, %v", got, err)
	}
	// A stored key in a file others can read is refused.
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := loadConfig(path); err == nil || !strings.Contains(err.Error(), `context "ci" but is readable by others (mode 0640)`) {
		t.Errorf("group-readable config with a stored key: %v", err)
	}
	delete(cfg.Contexts, "ci")
	if err := saveConfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadConfig(path); err != nil {
		t.Errorf("world-readable config with no stored key: %v", err)
	}
	// No file: an empty config.
	if got, err := loadConfig(filepath.Join(t.TempDir(), "none.json")); err != nil || len(got.Contexts) != 0 {
		t.Errorf("missing file: %+v, %v", got, err)
	}
}

func TestConfigBadFile(t *testing.T) {
	path := isolateConfig(t)
	for _, tc := range []struct{ body, want string }{
		{"{\n  \"contexts\": {\n    \"a\": {\"host\": \"http://x\",}\n  }\n}", "line 3, column"},
		{"{\n  \"contexts\": {\"a\": {\"host\": 7}}\n}", `line 2, column 31: field "contexts.host": want a string`},
		{`{"contexts": {"a": {"host": "http://x", "apikey": "k"}}}`, `unknown field "apikey"`},
		{`{"contexts": {"a": {"host": "http://x"}}`, "line 1, column 41: unexpected EOF"},
		{`{"contexts": {}} {}`, "data after the top-level object"},
		{`[]`, "want a main.cliConfig"},
		{`{"contexts": {"a": {}}}`, `context "a": field "host": missing`},
		{`{"contexts": {"a": {"host": "ftp://x"}}}`, `context "a": field "host": "ftp://x": scheme must be`},
		{`{"contexts": {"a": {"host": "https://x", "tls_fingerprint": "sha256:zz"}}}`, `context "a": field "tls_fingerprint": invalid TLS fingerprint`},
		{`{"contexts": {"a": {"host": "http://x", "tls_ca": "/ca.pem"}}}`, `need an https:// host`},
		{`{"contexts": {"a": {"host": "https://x", "api_key": "k", "api_key_file": "/k"}}}`, `give one, not both`},
		{`{"contexts": {"a": {"host": "https://x", "api_key_file": "rel/k"}}}`, `field "api_key_file": "rel/k" is not an absolute path`},
		{`{"contexts": {"a b": {"host": "https://x"}}}`, `invalid context name "a b"`},
		{`{"contexts": {"default": {"host": "https://x"}}}`, `context "default": the name is reserved`},
		{`{"contexts": {"a": null}}`, `context "a": null`},
		{`{"current": "b", "contexts": {"a": {"host": "https://x"}}}`, `field "current": no context "b"`},
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := loadConfig(path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error %v, want one naming %s and %q", tc.body, err, path, tc.want)
		}
		// Through the CLI: one line, naming the file.
		_, stderr, code := runBare(t, "", "ls")
		if code == 0 || !strings.Contains(stderr, path) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%s: berth ls: %d %q", tc.body, code, stderr)
		}
	}
	// A config file that is not readable as one (a directory).
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := loadConfig(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("directory as config: %v", err)
	}
}

// TestConnPrecedence: flags, then BERTH_*, then --context/BERTH_CONTEXT,
// then the current context, then the default; a context's key and TLS
// never go to a host it did not name.
func TestConnPrecedence(t *testing.T) {
	path := isolateConfig(t)
	keyFile := filepath.Join(t.TempDir(), "prod.key")
	if err := os.WriteFile(keyFile, []byte("k-prod\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &cliConfig{Current: "prod", Contexts: map[string]*contextDef{
		"prod":    {Host: "https://prod.example", APIKeyFile: keyFile, TLSFingerprint: testPin},
		"staging": {Host: "https://staging.example", APIKey: "k-staging", TLSCA: "/etc/ssl/staging.pem"},
	}}
	if err := saveConfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	type want struct{ host, key, fp, ca, ctx string }
	for _, tc := range []struct {
		name string
		g    globals
		env  map[string]string
		want want
	}{
		{"current context", globals{}, nil, want{"https://prod.example", "k-prod", testPin, "", "prod"}},
		{"BERTH_CONTEXT over current", globals{}, map[string]string{contextEnv: "staging"},
			want{"https://staging.example", "k-staging", "", "/etc/ssl/staging.pem", "staging"}},
		{"--context over BERTH_CONTEXT", globals{context: "prod"}, map[string]string{contextEnv: "staging"},
			want{"https://prod.example", "k-prod", testPin, "", "prod"}},
		{"--context default", globals{context: "default"}, nil, want{client.DefaultHost, "", "", "", ""}},
		{"env key over context key", globals{}, map[string]string{"BERTH_API_KEY": "k-env"},
			want{"https://prod.example", "k-env", testPin, "", "prod"}},
		{"flag key over env key", globals{apiKey: "k-flag"}, map[string]string{"BERTH_API_KEY": "k-env"},
			want{"https://prod.example", "k-flag", testPin, "", "prod"}},
		{"env pin over context TLS", globals{context: "staging"}, map[string]string{client.TLSFingerprintEnv: "sha256:env"},
			want{"https://staging.example", "k-staging", "sha256:env", "", "staging"}},
		{"flag CA over context TLS", globals{tlsCA: "/ca.pem"}, nil,
			want{"https://prod.example", "k-prod", "", "/ca.pem", "prod"}},
		{"BERTH_HOST turns the context off", globals{}, map[string]string{"BERTH_HOST": "https://other.example"},
			want{"https://other.example", "", "", "", ""}},
		{"BERTH_HOST over BERTH_CONTEXT", globals{}, map[string]string{"BERTH_HOST": "https://other.example", contextEnv: "staging"},
			want{"https://other.example", "", "", "", ""}},
		{"--host over everything", globals{host: "unix:///x.sock"}, map[string]string{"BERTH_HOST": "https://other.example", "BERTH_API_KEY": "k-env"},
			want{"unix:///x.sock", "k-env", "", "", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			s, err := tc.g.resolve()
			if err != nil {
				t.Fatal(err)
			}
			got := want{s.host, s.apiKey, s.tlsFingerprint, s.tlsCA, s.context}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	// No config at all: the default socket.
	isolateConfig(t)
	if s, err := (&globals{}).resolve(); err != nil || s.host != client.DefaultHost || s.apiKey != "" || s.context != "" {
		t.Errorf("no config: %+v, %v", s, err)
	}
	// Errors: an unknown context, --host with --context, a missing key file.
	if _, err := (&globals{context: "nope"}).resolve(); err == nil || !strings.Contains(err.Error(), `context "nope" (flag --context) is not in `) {
		t.Errorf("unknown context: %v", err)
	}
	if _, err := (&globals{host: "unix:///x", context: "prod"}).resolve(); err == nil || !strings.Contains(err.Error(), "--host and --context") {
		t.Errorf("--host with --context: %v", err)
	}
	path = isolateConfig(t)
	if err := saveConfig(path, &cliConfig{Current: "gone", Contexts: map[string]*contextDef{"gone": {Host: "https://g", APIKeyFile: "/nonexistent/key"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := (&globals{}).resolve(); err == nil || !strings.Contains(err.Error(), `context "gone": API key file`) || !strings.Contains(err.Error(), "/nonexistent/key") {
		t.Errorf("missing key file: %v", err)
	}
}

// authRecorder is a daemon that answers the sandbox list and remembers the
// Authorization header of each request.
func authRecorder(t *testing.T) (string, func() []string) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		writeTestJSON(w, 200, []api.Sandbox{{ID: "sbctx", State: "running"}})
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// TestContextCLI drives add, use, ls, show and rm, and proves a request
// goes where the context says with its key, and only there.
func TestContextCLI(t *testing.T) {
	path := isolateConfig(t)
	prodURL, prodSeen := authRecorder(t)
	otherURL, otherSeen := authRecorder(t)
	keyFile := filepath.Join(t.TempDir(), "prod.key")
	if err := os.WriteFile(keyFile, []byte("k-prod-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustRun := func(stdin string, args ...string) string {
		t.Helper()
		out, errs, code := runBare(t, stdin, args...)
		if code != 0 {
			t.Fatalf("berth %v: %d %s", args, code, errs)
		}
		if strings.Contains(out+errs, "k-prod-secret") || strings.Contains(out+errs, "k-ci-secret") {
			t.Fatalf("berth %v printed an API key: %s %s", args, out, errs)
		}
		return out
	}
	mustRun("", "context", "add", "prod", "--host", prodURL, "--api-key-file", keyFile)
	mustRun("k-ci-secret\n", "context", "add", "ci", "--host", otherURL, "--api-key-stdin")
	if _, errs, code := runBare(t, "", "context", "add", "prod", "--host", prodURL); code == 0 || !strings.Contains(errs, "exists") {
		t.Errorf("adding prod twice: %d %s", code, errs)
	}
	for _, bad := range [][]string{
		{"context", "add", "x"},
		{"context", "add", "x", "--host", "ftp://h"},
		{"context", "add", "x", "--host", "http://h", "--tls-fingerprint", testPin},
		{"context", "add", "x", "--host", "https://h", "--api-key-file", "/nonexistent"},
		{"context", "add", "default", "--host", "https://h"},
		{"context", "add", "-bad", "--host", "https://h"},
		{"context", "use", "nope"},
		{"context", "rm", "nope"},
		{"context", "rm", "default"},
	} {
		if _, errs, code := runBare(t, "", bad...); code == 0 || strings.Count(errs, "\n") != 1 {
			t.Errorf("berth %v: %d %q", bad, code, errs)
		}
	}

	// No current context yet: the default socket, nothing sent anywhere.
	if out := mustRun("", "context", "ls"); !strings.Contains(out, "default *") || !strings.Contains(out, "prod ") || !strings.Contains(out, keyFile) || !strings.Contains(out, "stored") {
		t.Errorf("context ls:\n%s", out)
	}
	if out := mustRun("", "context", "use", "prod"); strings.TrimSpace(out) != "prod" {
		t.Errorf("context use: %q", out)
	}
	if out := mustRun("", "context", "ls"); !strings.Contains(out, "prod *") || strings.Contains(out, "default *") {
		t.Errorf("context ls after use:\n%s", out)
	}
	if out := mustRun("", "context", "ls", "-q"); out != "ci\ndefault\nprod\n" && out != "default\nci\nprod\n" {
		t.Errorf("context ls -q: %q", out)
	}
	if out := mustRun("", "context", "show"); !strings.Contains(out, prodURL) || !strings.Contains(out, "(context prod)") || !strings.Contains(out, "file "+keyFile) {
		t.Errorf("context show:\n%s", out)
	}
	if out := mustRun("", "ls", "-q"); strings.TrimSpace(out) != "sbctx" {
		t.Errorf("ls through the context: %q", out)
	}
	if got := prodSeen(); len(got) != 1 || got[0] != "Bearer k-prod-secret" {
		t.Errorf("prod daemon saw %q", got)
	}
	// --context and BERTH_CONTEXT pick another for one command.
	mustRun("", "--context", "ci", "ls", "-q")
	t.Setenv(contextEnv, "ci")
	mustRun("", "ls", "-q")
	if got := otherSeen(); len(got) != 2 || got[0] != "Bearer k-ci-secret" || got[1] != "Bearer k-ci-secret" {
		t.Errorf("ci daemon saw %q", got)
	}
	t.Setenv(contextEnv, "")
	// BERTH_HOST elsewhere: the current context's key is not sent there.
	t.Setenv("BERTH_HOST", otherURL)
	mustRun("", "ls", "-q")
	if got := otherSeen(); len(got) != 3 || got[2] != "" {
		t.Errorf("BERTH_HOST daemon saw %q", got)
	}
	t.Setenv("BERTH_HOST", "")
	if got := prodSeen(); len(got) != 1 {
		t.Errorf("prod daemon saw %d requests, want 1", len(got))
	}

	mustRun("", "context", "rm", "prod")
	cfg, err := loadConfig(path)
	if err != nil || cfg.Current != "" || cfg.Contexts["prod"] != nil || cfg.Contexts["ci"] == nil || cfg.Contexts["ci"].APIKey != "k-ci-secret" {
		t.Errorf("after rm: %+v %v", cfg, err)
	}
	if out := mustRun("", "__complete", "context", "use", ""); !strings.Contains(out, "ci\n") || !strings.Contains(out, "default\n") {
		t.Errorf("completing context use: %q", out)
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		``,
		`{}`,
		`{"current": "a", "contexts": {"a": {"host": "https://x:1", "api_key_file": "/k", "tls_fingerprint": "` + testPin + `"}}}`,
		`{"contexts": {"b": {"host": "unix:///run/b.sock", "api_key": "k"}}}`,
		`{"contexts": {"c": {"host": "https://c", "tls_ca": "/ca.pem"}}}`,
		`{"contexts": {"a": {"host": 1}}}`,
		`{"contexts": {"a": null}}`,
		"{\n\"contexts\": {\"a\": {\"host\": \"http://x\",}}}",
		`[1,2]`,
		`{"contexts": {}} x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := parseConfig(b)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error: %q", err)
			}
			return
		}
		// What parses, saved and parsed again, is the same config.
		path := filepath.Join(t.TempDir(), configFileName)
		if err := saveConfig(path, cfg); err != nil {
			t.Fatal(err)
		}
		again, err := loadConfig(path)
		if err != nil {
			t.Fatalf("reparse of %q: %v", b, err)
		}
		if len(again.Contexts) != len(cfg.Contexts) || again.Current != cfg.Current {
			t.Fatalf("round trip of %q: %+v != %+v", b, again, cfg)
		}
		for n, d := range cfg.Contexts {
			if *again.Contexts[n] != *d {
				t.Fatalf("round trip of %q: context %q %+v != %+v", b, n, again.Contexts[n], d)
			}
		}
	})
}

func TestValidContextName(t *testing.T) {
	for _, ok := range []string{"a", "prod", "Prod-2.eu_west", "0", strings.Repeat("x", 63)} {
		if err := validContextName(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", ".a", "_a", "a b", "a/b", "a:b", "é", strings.Repeat("x", 64), "a\n"} {
		if validContextName(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestConfigConcurrentUpdates: commands changing contexts at once each
// keep their change.
func TestConfigConcurrentUpdates(t *testing.T) {
	path := isolateConfig(t)
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- updateConfig(func(cfg *cliConfig, _ string) error {
				if cfg.Contexts == nil {
					cfg.Contexts = map[string]*contextDef{}
				}
				cfg.Contexts[fmt.Sprintf("c%d", i)] = &contextDef{Host: "https://h"}
				return nil
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := loadConfig(path)
	if err != nil || len(cfg.Contexts) != n {
		t.Fatalf("after %d concurrent adds: %d contexts, %v", n, len(cfg.Contexts), err)
	}
}
