package main

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/daemon"
)

// addPersistRoutes adds the lifecycle, diff and volume routes to the fake
// daemon: sb1 starts running, sb2 paused.
func (f *fakeDaemon) addPersistRoutes(mux *http.ServeMux) {
	f.volumes = map[string]api.Volume{
		"data": {ID: "v1", Name: "data", State: "attached", SizeBytes: 10 << 30, UsedBytes: 3 << 30, Inodes: 1000, UsedInodes: 10,
			AttachedTo: "sb1", Keep: true, CreatedAt: time.Now().Add(-2 * time.Hour)},
	}
	from := map[string][]string{
		"pause": {"running"}, "resume": {"paused"}, "stop": {"running", "paused"}, "start": {"stopped"},
		"reset": {"running", "stopped"}, "touch": {"running", "paused", "stopped"},
		"quarantine": {"running", "paused", "stopped"}, "release": {"quarantined"},
	}
	to := map[string]string{"pause": "paused", "resume": "running", "stop": "stopped", "start": "running",
		"quarantine": "quarantined", "release": "running"}
	errJSON := func(w http.ResponseWriter, status int, code, msg string) {
		writeTestJSON(w, status, api.ErrorBody{Error: api.Error{Code: code, Message: msg}})
	}
	mux.HandleFunc("POST /v1/sandboxes/{id}/{verb}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		id, verb := r.PathValue("id"), r.PathValue("verb")
		sb, ok := f.sandboxes[id]
		switch {
		case from[verb] == nil:
			errJSON(w, 404, "not_found", "no such route")
		case !ok:
			errJSON(w, 404, "not_found", `sandbox "`+id+`" not found`)
		case !slices.Contains(from[verb], sb.State):
			errJSON(w, 409, "conflict", "cannot "+verb+" sandbox "+id+": it is "+sb.State)
		default:
			if s, ok := to[verb]; ok {
				sb.State = s
			}
			now := time.Now()
			sb.LastActivityAt = &now
			f.sandboxes[id] = sb
			writeTestJSON(w, 200, sb)
		}
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/diff", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, 200, []api.DiffEntry{
			{Path: "/workspace/out.bin", Kind: "added", Size: 3 << 20},
			{Path: "/workspace/cache", Kind: "added", Dir: true},
			{Path: "/etc/hosts", Kind: "changed", Size: 200},
			{Path: "/usr/share/doc/x", Kind: "removed"},
		})
	})
	mux.HandleFunc("POST /v1/volumes", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var req api.CreateVolumeRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		if _, ok := f.volumes[req.Name]; ok {
			errJSON(w, 409, "conflict", `volume "`+req.Name+`" already exists`)
			return
		}
		v := api.Volume{ID: "v-" + req.Name, Name: req.Name, State: "available", SizeBytes: req.SizeBytes, Inodes: req.Inodes, CreatedAt: time.Now()}
		f.volumes[req.Name] = v
		writeTestJSON(w, 201, v)
	})
	mux.HandleFunc("GET /v1/volumes", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		list := []api.Volume{}
		for _, name := range slices.Sorted(func(yield func(string) bool) {
			for k := range f.volumes {
				if !yield(k) {
					return
				}
			}
		}) {
			list = append(list, f.volumes[name])
		}
		writeTestJSON(w, 200, list)
	})
	mux.HandleFunc("GET /v1/volumes/{name}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		v, ok := f.volumes[r.PathValue("name")]
		if !ok {
			errJSON(w, 404, "not_found", `volume "`+r.PathValue("name")+`" not found`)
			return
		}
		writeTestJSON(w, 200, v)
	})
	mux.HandleFunc("DELETE /v1/volumes/{name}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		v, ok := f.volumes[r.PathValue("name")]
		switch {
		case !ok:
			errJSON(w, 404, "not_found", `volume "`+r.PathValue("name")+`" not found`)
		case v.AttachedTo != "":
			errJSON(w, 409, "conflict", `volume "`+v.Name+`" is attached to sandbox `+v.AttachedTo)
		default:
			delete(f.volumes, v.Name)
			w.WriteHeader(http.StatusNoContent)
		}
	})
}

func TestParseVolumeSpec(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want api.VolumeMount
		err  string
	}{
		{"data", api.VolumeMount{Name: "data"}, ""},
		{"data:/data", api.VolumeMount{Name: "data", Path: "/data"}, ""},
		{"data:/data:ro", api.VolumeMount{Name: "data", Path: "/data", ReadOnly: true}, ""},
		{"data:/data:rw", api.VolumeMount{Name: "data", Path: "/data"}, ""},
		{"data::ro", api.VolumeMount{Name: "data", ReadOnly: true}, ""},
		{"data:", api.VolumeMount{Name: "data"}, ""},
		{"", api.VolumeMount{}, "NAME must be"},
		{":/data", api.VolumeMount{}, "NAME must be"},
		{"a/b:/data", api.VolumeMount{}, "NAME must be"},
		{"data:rel/path", api.VolumeMount{}, "PATH must be absolute"},
		{"data:ro", api.VolumeMount{}, "PATH must be absolute"},
		{"data:/data:rx", api.VolumeMount{}, "mode must be ro or rw"},
		{"data:/data:ro:x", api.VolumeMount{}, "want NAME[:PATH[:ro]]"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseVolumeSpec(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("parseVolumeSpec(%q) = %+v, %v; want error containing %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseVolumeSpec(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
		})
	}
	if _, err := parseVolumeSpecs([]string{"a:/x", "b:/y", "a:/z"}); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("duplicate volume: %v", err)
	}
	if ms, err := parseVolumeSpecs(nil); ms != nil || err != nil {
		t.Errorf("no volumes: %v, %v", ms, err)
	}
}

func TestParseDurationDays(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour, "0.5d": 12 * time.Hour, "2d30m": 48*time.Hour + 30*time.Minute,
	} {
		if got, err := parseDuration(in); err != nil || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"d", "-1d", "1d-1h", "1dd", "xd", "1d1x"} {
		if got, err := parseDuration(bad); err == nil {
			t.Errorf("parseDuration(%q) = %v, want error", bad, got)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for in, want := range map[time.Duration]string{
		30 * time.Second: "30s", 10 * time.Minute: "10m", 90 * time.Minute: "1h30m", 2 * time.Hour: "2h",
		7 * 24 * time.Hour: "7d", 25 * time.Hour: "25h", 1500 * time.Millisecond: "1.5s",
	} {
		if got := formatDuration(in); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestCreatePersistentAndPolicyFlags(t *testing.T) {
	f, host := newFakeDaemon(t)
	out, errs, code := runCLI(t, host, "", "create", "--persistent", "--persist-root", "--volume-size", "10g",
		"--volume-inodes", "50000", "--volume", "data:/data", "--volume", "models:/models:ro", "--keep-volume",
		"--idle-timeout", "15m", "--on-idle", "stop", "--max-age", "7d", "--on-max-age", "stop", "--retention", "3600",
		"--auto-resume", "--idle-cpu-threshold", "0.2")
	if code != 0 || out != "sbnew\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	req := f.lastCreate
	wantVols := []api.VolumeMount{{Name: "data", Path: "/data"}, {Name: "models", Path: "/models", ReadOnly: true}}
	if !req.Persistent || !req.PersistRoot || req.VolumeSizeBytes != 10<<30 || req.VolumeInodes != 50000 ||
		!slices.Equal(req.Volumes, wantVols) || !req.KeepVolume {
		t.Errorf("request = %+v", req)
	}
	want := api.Policy{IdleTimeoutSeconds: 900, OnIdle: "stop", MaxAgeSeconds: 7 * 86400, OnMaxAge: "stop",
		RetentionSeconds: 3600, AutoResume: true, IdleCPUThreshold: 0.2}
	if req.Policy != want {
		t.Errorf("policy = %+v, want %+v", req.Policy, want)
	}

	// The wire format: policy fields flat in the create body.
	b, _ := json.Marshal(req)
	for _, k := range []string{`"idle_timeout_seconds":900`, `"on_idle":"stop"`, `"auto_resume":true`, `"volumes":[`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("body %s lacks %s", b, k)
		}
	}

	// Workspace-volume flags imply --persistent; a plain create sends none of it.
	if _, errs, code := runCLI(t, host, "", "create", "--keep-volume"); code != 0 || !f.lastCreate.Persistent || !f.lastCreate.KeepVolume {
		t.Errorf("--keep-volume alone: exit %d, %q, %+v", code, errs, f.lastCreate)
	}
	if _, errs, code := runCLI(t, host, "", "create", "--idle-timeout", "2s"); code != 0 || f.lastCreate.Persistent ||
		f.lastCreate.IdleTimeoutSeconds != 2 || f.lastCreate.OnIdle != "" {
		t.Errorf("--idle-timeout alone: exit %d, %q, %+v", code, errs, f.lastCreate)
	}
	if _, errs, code := runCLI(t, host, "", "create", "--idle-cpu-threshold", "-1"); code != 0 || f.lastCreate.IdleCPUThreshold != -1 {
		t.Errorf("negative threshold: exit %d, %q, %+v", code, errs, f.lastCreate)
	}
}

func TestCreateRejectsBadPersistFlags(t *testing.T) {
	_, host := newFakeDaemon(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--on-idle", "delete"}, `invalid argument "delete" for "--on-idle" flag: want pause or stop`},
		{[]string{"--on-max-age", "pause"}, `invalid argument "pause" for "--on-max-age" flag: want stop or delete`},
		{[]string{"--idle-timeout", "soon"}, `invalid argument "soon" for "--idle-timeout" flag`},
		{[]string{"--max-age", "-1h"}, "must not be negative"},
		{[]string{"--retention", "1y"}, `invalid argument "1y" for "--retention" flag`},
		{[]string{"--volume-size", "lots"}, `invalid argument "lots" for "--volume-size" flag`},
		{[]string{"--volume-inodes", "-5"}, "--volume-inodes must not be negative"},
		{[]string{"--idle-cpu-threshold", "NaN"}, "want a number of cores"},
		{[]string{"--volume", "data:rel"}, "PATH must be absolute"},
		{[]string{"--volume", "a:/x", "--volume", "a:/y"}, `volume "a" is given twice`},
		{[]string{"--persistent=false", "--persist-root"}, "--persist-root needs a persistent sandbox"},
	} {
		out, errs, code := runCLI(t, host, "", append([]string{"create"}, tc.args...)...)
		if code != 1 || out != "" || !strings.Contains(errs, tc.want) || strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "berth: ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want one line containing %q", tc.args, code, out, errs, tc.want)
		}
	}
}

func TestRunHasNoPersistFlags(t *testing.T) {
	_, host := newFakeDaemon(t)
	for _, flag := range []string{"--persistent", "--volume-size=1g", "--idle-timeout=1m", "--volume=data", "--keep-volume"} {
		if _, errs, code := runCLI(t, host, "", "run", flag, "--", "true"); code != 1 || !strings.Contains(errs, "unknown flag") {
			t.Errorf("run %s: exit %d, %q", flag, code, errs)
		}
	}
}

func TestLifecycleVerbsCLI(t *testing.T) {
	f, host := newFakeDaemon(t)
	steps := []struct {
		args     []string
		out      string
		code     int
		errs     string
		sb1, sb2 string // states afterwards
	}{
		{[]string{"pause", "sb1"}, "sb1\n", 0, "", "paused", "paused"},
		{[]string{"resume", "sb1", "sb2"}, "sb1\nsb2\n", 0, "", "running", "running"},
		{[]string{"pause", "sb1", "nope", "sb2"}, "sb1\nsb2\n", 1, "berth: sandbox \"nope\" not found\n", "paused", "paused"},
		{[]string{"start", "sb1"}, "", 1, "berth: cannot start sandbox sb1: it is paused\n", "paused", "paused"},
		{[]string{"stop", "sb1"}, "sb1\n", 0, "", "stopped", "paused"},
		{[]string{"touch", "sb1", "sb2"}, "sb1\nsb2\n", 0, "", "stopped", "paused"},
		{[]string{"reset", "sb1"}, "sb1\n", 0, "", "stopped", "paused"},
		{[]string{"start", "sb1"}, "sb1\n", 0, "", "running", "paused"},
		{[]string{"quarantine", "sb1"}, "sb1\n", 0, "", "quarantined", "paused"},
		{[]string{"release", "sb1"}, "sb1\n", 0, "", "running", "paused"},
		{[]string{"release", "sb1"}, "", 1, "berth: cannot release sandbox sb1: it is running\n", "running", "paused"},
	}
	for _, s := range steps {
		out, errs, code := runCLI(t, host, "", s.args...)
		if out != s.out || code != s.code || errs != s.errs {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q; want %d, %q, %q", s.args, code, out, errs, s.code, s.out, s.errs)
		}
		if st1, st2 := f.sandboxes["sb1"].State, f.sandboxes["sb2"].State; st1 != s.sb1 || st2 != s.sb2 {
			t.Fatalf("%v: states %s %s, want %s %s", s.args, st1, st2, s.sb1, s.sb2)
		}
	}

	// -o json: an array for the multi-id verbs, an object for quarantine/release.
	out, _, code := runCLI(t, host, "", "resume", "sb2", "-o", "json")
	var list []api.Sandbox
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].State != "running" || list[0].LastActivityAt == nil {
		t.Errorf("resume -o json: exit %d, %s", code, out)
	}
	out, _, code = runCLI(t, host, "", "touch", "nope", "-o", "json")
	if code != 1 || strings.TrimSpace(out) != "[]" {
		t.Errorf("touch nope -o json: exit %d, %q", code, out)
	}
	out, _, code = runCLI(t, host, "", "quarantine", "sb2", "-o", "json")
	var sb api.Sandbox
	if code != 0 || json.Unmarshal([]byte(out), &sb) != nil || sb.State != "quarantined" {
		t.Errorf("quarantine -o json: exit %d, %s", code, out)
	}
	if _, errs, code := runCLI(t, host, "", "quarantine", "sb1", "sb2"); code != 1 || !strings.Contains(errs, "needs a sandbox id") {
		t.Errorf("quarantine with two ids: exit %d, %q", code, errs)
	}
	if _, errs, code := runCLI(t, host, "", "pause"); code != 1 || !strings.Contains(errs, "needs at least one sandbox id") {
		t.Errorf("pause without id: exit %d, %q", code, errs)
	}
}

func TestDiffCLI(t *testing.T) {
	_, host := newFakeDaemon(t)
	out, errs, code := runCLI(t, host, "", "diff", "sb1")
	if code != 0 {
		t.Fatalf("exit %d, %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{"KIND SIZE PATH", "added 3MiB /workspace/out.bin", "added - /workspace/cache/", "changed 200B /etc/hosts", "removed - /usr/share/doc/x"}
	if len(lines) != len(want) {
		t.Fatalf("diff:\n%s", out)
	}
	for i := range want {
		if got := strings.Join(strings.Fields(lines[i]), " "); got != want[i] {
			t.Errorf("line %d = %q, want %q", i, got, want[i])
		}
	}
	out, _, code = runCLI(t, host, "", "diff", "sb1", "-o", "json")
	var d []api.DiffEntry
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil || len(d) != 4 || !d[1].Dir || d[0].Size != 3<<20 {
		t.Errorf("diff -o json: exit %d, %s", code, out)
	}
}

func TestVolumeCLI(t *testing.T) {
	f, host := newFakeDaemon(t)
	out, errs, code := runCLI(t, host, "", "volume", "create", "cache", "--size", "2g", "--inodes", "100")
	if code != 0 || out != "cache\n" {
		t.Fatalf("volume create: exit %d, %q, %q", code, out, errs)
	}
	if v := f.volumes["cache"]; v.SizeBytes != 2<<30 || v.Inodes != 100 {
		t.Errorf("created %+v", v)
	}
	if _, errs, code := runCLI(t, host, "", "volume", "create", "cache"); code != 1 || errs != "berth: volume \"cache\" already exists\n" {
		t.Errorf("duplicate: exit %d, %q", code, errs)
	}
	if _, errs, code := runCLI(t, host, "", "volume", "create", "x", "--size", "big"); code != 1 || !strings.Contains(errs, `invalid argument "big" for "--size" flag`) {
		t.Errorf("bad size: exit %d, %q", code, errs)
	}
	out, _, code = runCLI(t, host, "", "volume", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 {
		t.Fatalf("volume ls: exit %d\n%s", code, out)
	}
	for i, want := range []string{
		"NAME STATE SIZE USED INODES ATTACHED KEEP AGE",
		"cache available 2GiB 0B 0/100 - no 0s",
		"data attached 10GiB 3GiB 10/1000 sb1 yes 2h",
	} {
		if got := strings.Join(strings.Fields(lines[i]), " "); got != want {
			t.Errorf("ls line %d = %q, want %q", i, got, want)
		}
	}
	out, _, code = runCLI(t, host, "", "volume", "ls", "-o", "json")
	var vs []api.Volume
	if code != 0 || json.Unmarshal([]byte(out), &vs) != nil || len(vs) != 2 {
		t.Errorf("volume ls -o json: exit %d, %s", code, out)
	}
	out, _, code = runCLI(t, host, "", "volume", "inspect", "data")
	if code != 0 || !strings.Contains(out, "3GiB/10GiB (30%)") || !strings.Contains(out, "10/1000") || !strings.Contains(out, "sb1") {
		t.Errorf("volume inspect:\n%s", out)
	}
	out, _, code = runCLI(t, host, "", "volume", "inspect", "data", "-o", "json")
	var v api.Volume
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Name != "data" || !v.Keep {
		t.Errorf("volume inspect -o json: exit %d, %s", code, out)
	}
	out, errs, code = runCLI(t, host, "", "volume", "rm", "cache", "data", "nope")
	if code != 1 || out != "cache\n" || errs != "berth: volume \"data\" is attached to sandbox sb1\nberth: volume \"nope\" not found\n" {
		t.Errorf("volume rm: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if _, ok := f.volumes["cache"]; ok {
		t.Error("cache not deleted")
	}
}

func TestInspectShowsPersistence(t *testing.T) {
	f, host := newFakeDaemon(t)
	now := time.Now()
	act, next := now.Add(-time.Minute), now.Add(14*time.Minute)
	f.mu.Lock()
	sb := f.sandboxes["sb1"]
	sb.Hostname, sb.PersistRoot, sb.KeepVolume = "dev", true, true
	sb.Volumes = []api.VolumeMount{{Name: "data", Path: "/data", ReadOnly: true}}
	sb.Policy = api.Policy{IdleTimeoutSeconds: 900, OnIdle: "pause", MaxAgeSeconds: 7 * 86400, OnMaxAge: "delete",
		RetentionSeconds: 3600, AutoResume: true}
	sb.LastActivityAt, sb.PausedAt, sb.StoppedAt = &act, &act, &act
	sb.NextAction, sb.NextActionAt = "pause", &next
	f.sandboxes["sb1"] = sb
	f.mu.Unlock()

	out, _, code := runCLI(t, host, "", "inspect", "sb1")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"Persist root:", "Keep volume:", "Hostname:", "Last activity:", "Paused:", "Stopped:",
		"Policy:", "idle_timeout=15m on_idle=pause max_age=7d on_max_age=delete retention=1h auto_resume=true",
		"Next action:", "pause at ", "(in 1", "Storage:", "12MiB/1GiB (1%), inodes 120/65536 (volume sb1-workspace)",
		"Volumes:", "data:/data:ro",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = runCLI(t, host, "", "inspect", "sb2")
	if !strings.Contains(out, "idle_timeout=none max_age=none retention=none auto_resume=false") || strings.Contains(out, "Storage:") {
		t.Errorf("inspect sb2:\n%s", out)
	}
}

func TestEventsAfterFlag(t *testing.T) {
	f, host := newFakeDaemon(t)
	if _, errs, code := runCLI(t, host, "", "events", "sb1", "--after", "7"); code != 0 || f.afterQuery != "7" {
		t.Errorf("events --after 7: exit %d, %q, after=%q", code, errs, f.afterQuery)
	}
	if _, _, code := runCLI(t, host, "", "events", "sb1"); code != 0 || f.afterQuery != "" {
		t.Errorf("events: exit %d, after=%q", code, f.afterQuery)
	}
	if _, _, code := runCLI(t, host, "", "events", "sb1", "--after", "0"); code != 0 || f.afterQuery != "0" {
		t.Errorf("events --after 0: exit %d, after=%q", code, f.afterQuery)
	}
}

func TestServeWebhookFlags(t *testing.T) {
	serve := func(env string, args ...string) (daemon.Config, error) {
		t.Setenv(webhookSecretEnv, env)
		var got daemon.Config
		cmd := newServeCmdWith(func(_ context.Context, cfg daemon.Config) error { got = cfg; return nil })
		cmd.SetArgs(args)
		cmd.SilenceErrors, cmd.SilenceUsage = true, true
		err := cmd.ExecuteContext(context.Background())
		return got, err
	}
	cfg, err := serve("", "--webhook-url", "https://hooks.example/berth", "--webhook-secret", "s3cret", "--data-dir", "/tmp/d", "--log-level", "error")
	if err != nil || cfg.WebhookURL != "https://hooks.example/berth" || cfg.WebhookSecret != "s3cret" || cfg.DataDir != "/tmp/d" {
		t.Errorf("flags: %+v, %v", cfg, err)
	}
	cfg, err = serve("fromenv", "--webhook-url", "http://127.0.0.1:9/h", "--log-level", "error")
	if err != nil || cfg.WebhookSecret != "fromenv" {
		t.Errorf("env secret: %+v, %v", cfg, err)
	}
	cfg, err = serve("fromenv", "--webhook-url", "http://127.0.0.1:9/h", "--webhook-secret", "flag", "--log-level", "error")
	if err != nil || cfg.WebhookSecret != "flag" {
		t.Errorf("flag beats env: %+v, %v", cfg, err)
	}
	if cfg, err = serve("fromenv", "--log-level", "error"); err != nil || cfg.WebhookURL != "" {
		t.Errorf("no webhook: %+v, %v", cfg, err)
	}
	if _, err := serve("", "--webhook-url", "hooks.example/x"); err == nil || !strings.Contains(err.Error(), "invalid --webhook-url") {
		t.Errorf("bad url: %v", err)
	}
	if _, err := serve("", "--webhook-secret", "x"); err == nil || !strings.Contains(err.Error(), "needs --webhook-url") {
		t.Errorf("secret without url: %v", err)
	}
}
