package e2b

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/image/dockerfile"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// TestPlanBuild: an E2B build's steps as the Dockerfile berth builds,
// which berth's own Dockerfile reader accepts with the values intact
// (quotes, $, spaces), and what is refused.
func TestPlanBuild(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	has := func(h string) bool { return h == hash }
	in := &buildStart{FromImage: "e2bdev/base:latest", Steps: []templateStep{
		{Type: "COPY", Args: []string{"folder/*", "folder", "user", "0755"}, FilesHash: hash},
		{Type: "RUN", Args: []string{"echo \"a b\" $HOME\nls", "root"}},
		{Type: "ENV", Args: []string{"A", `x "y" $Z \ w`, "B", ""}},
		{Type: "WORKDIR", Args: []string{"/srv/my dir"}},
		{Type: "USER", Args: []string{"user"}},
		{Type: "RUN", Args: []string{"id"}, Force: true},
	}, StartCmd: "python3 -m http.server 8000", ReadyCmd: `[ -n "$(ss -Htuln sport = :8000)" ]`}
	base := &store.TemplateConfig{Workdir: "/workspace", User: ""}
	pl, err := planBuild(in, "bid", base, has)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := dockerfile.Convert([]byte(pl.dockerfile), dockerfile.Options{})
	if err != nil {
		t.Fatalf("%v\n%s", err, pl.dockerfile)
	}
	st := plan.Stages[plan.Target]
	if st.Base != "base" {
		t.Errorf("FROM %q, want berth's base", st.Base)
	}
	if len(st.Steps) != len(pl.stepOf) {
		t.Fatalf("%d steps, %d mapped:\n%s", len(st.Steps), len(pl.stepOf), pl.dockerfile)
	}
	var env [][2]string
	var runs [][]string
	var users, dirs []string
	for _, s := range st.Steps {
		switch s.Kind {
		case dockerfile.KindEnv:
			env = append(env, s.Env...)
		case dockerfile.KindRun:
			runs = append(runs, s.Run)
		case dockerfile.KindUser:
			users = append(users, s.User)
		case dockerfile.KindWorkdir:
			dirs = append(dirs, s.Workdir)
		case dockerfile.KindCopy:
			if s.Copy.Chown != "user" || s.Copy.Chmod != "0755" || !s.Copy.DstIsDir || s.Copy.Srcs[0] != "files/"+hash+"/folder/*" {
				t.Errorf("copy: %+v", s.Copy)
			}
		}
	}
	if len(env) != 2 || env[0] != [2]string{"A", `x "y" $Z \ w`} || env[1] != [2]string{"B", ""} {
		t.Errorf("env: %q", env)
	}
	if len(runs) != 2 || runs[0][2] != "echo \"a b\" $HOME\nls" || runs[1][2] != "id" {
		t.Errorf("runs: %q", runs)
	}
	// RUN as root, back to the base's (root), then the template's user.
	if strings.Join(users, ",") != "root,root,user" {
		t.Errorf("users: %q", users)
	}
	if strings.Join(dirs, ",") != "/workspace,/srv/my dir" {
		t.Errorf("workdirs: %q", dirs)
	}
	if pl.service == nil || pl.service.ReadyPort != 8000 || pl.service.Cmd[2] != in.StartCmd {
		t.Errorf("service: %+v", pl.service)
	}
	// The forced step's label, and E2B's step of each instruction.
	if !strings.Contains(pl.dockerfile, `LABEL sh.berth.e2b.build="bid"`) {
		t.Errorf("no force label:\n%s", pl.dockerfile)
	}
	if got := stepName(len(pl.stepOf), pl); got != "6" {
		t.Errorf("the last instruction is step %s, want 6", got)
	}
	if msg := stepError(0, pl, "Dockerfile: line 3 (COPY x): no such file"); msg != "failed to copy 'folder/*': no such file" {
		t.Errorf("copy error: %q", msg)
	}

	for _, c := range []struct {
		name string
		in   buildStart
	}{
		{"no base", buildStart{}},
		{"both bases", buildStart{FromImage: "a", FromTemplate: "b"}},
		{"registry", buildStart{FromImage: "a", FromImageRegistry: map[string]any{"type": "registry"}}},
		{"unknown step", buildStart{FromTemplate: "base", Steps: []templateStep{{Type: "ARG", Args: []string{"x"}}}}},
		{"not uploaded", buildStart{FromTemplate: "base", Steps: []templateStep{{Type: "COPY", Args: []string{"a", "b"}, FilesHash: strings.Repeat("cd", 32)}}}},
		{"escaping copy", buildStart{FromTemplate: "base", Steps: []templateStep{{Type: "COPY", Args: []string{"../etc", "b"}, FilesHash: hash}}}},
		{"env name", buildStart{FromTemplate: "base", Steps: []templateStep{{Type: "ENV", Args: []string{"A=B", "c"}}}}},
		{"env newline", buildStart{FromTemplate: "base", Steps: []templateStep{{Type: "ENV", Args: []string{"A", "b\nRUN x"}}}}},
		{"control", buildStart{FromTemplate: "base", Steps: []templateStep{{Type: "RUN", Args: []string{"echo \x1b[31m"}}}}},
		{"workdir newline", buildStart{FromTemplate: "base", Steps: []templateStep{{Type: "WORKDIR", Args: []string{"/a\nRUN id"}}}}},
		{"ready", buildStart{FromTemplate: "base", StartCmd: "x", ReadyCmd: "pgrep x"}},
		{"image injection", buildStart{FromImage: "a\nRUN id"}},
	} {
		if _, err := planBuild(&c.in, "bid", nil, has); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

// FuzzPlanBuild: whatever the steps, the Dockerfile written is one
// instruction a line that berth's reader takes as the steps mapped, or
// the build is refused.
func FuzzPlanBuild(f *testing.F) {
	f.Add("RUN", "echo hi", "root", "/srv")
	f.Add("ENV", "A", `"q" $x \`, "/a b")
	f.Add("USER", "user", "", "")
	f.Add("WORKDIR", "/srv/\"x\"", "", "rel")
	f.Fuzz(func(t *testing.T, typ, a, b, dir string) {
		args := []string{a}
		if b != "" {
			args = append(args, b)
		}
		in := &buildStart{FromTemplate: "base", Steps: []templateStep{{Type: typ, Args: args}, {Type: "WORKDIR", Args: []string{dir}}}}
		pl, err := planBuild(in, "bid", &store.TemplateConfig{}, func(string) bool { return false })
		if err != nil {
			return
		}
		plan, err := dockerfile.Convert([]byte(pl.dockerfile), dockerfile.Options{})
		if err != nil {
			return // berth's reader refuses it: the build fails, nothing is built
		}
		if n := len(plan.Stages[plan.Target].Steps); n != len(pl.stepOf) {
			t.Fatalf("%d instructions read, %d written:\n%s", n, len(pl.stepOf), pl.dockerfile)
		}
	})
}

// TestBerthName: E2B's name[:tag] as the berth template of it, and the
// names refused (a tag's name with a '.', which name.tag could not tell
// apart, bad characters, too long).
func TestBerthName(t *testing.T) {
	for ref, want := range map[string]string{
		"my-app":               "my-app",
		"my-app:default":       "my-app",
		"my-app:v1":            "my-app.v1",
		"my-app:v1.0":          "my-app.v1.0",
		"py3.11":               "py3.11",
		"e2b-tags-test:v1-abc": "e2b-tags-test.v1-abc",
	} {
		if got, err := refName(ref); err != nil || got != want {
			t.Errorf("%q: %q %v, want %q", ref, got, err, want)
		}
	}
	for _, ref := range []string{"", ":v1", "my-app:", "my-app::v1", "my.app:v1", "my-app:-v1", "my-app:v 1", "a:" + strings.Repeat("b", 62), "a/b:c"} {
		if got, err := refName(ref); err == nil {
			t.Errorf("%q: accepted as %q", ref, got)
		}
	}
	name, tags, err := buildTags("app:v1", []string{"latest", "v1"})
	if err != nil || name != "app" || strings.Join(tags, ",") != "v1,latest" {
		t.Errorf("buildTags: %q %q %v", name, tags, err)
	}
	if _, tags, _ := buildTags("app", nil); strings.Join(tags, ",") != defaultTag {
		t.Errorf("no tag: %q", tags)
	}
}

// FuzzBerthName: a name berthName accepts is a valid berth template
// name, and two tagged refs (or two untagged ones) that map to one
// template are the same name and tag. (An untagged name with a '.' is a
// berth name of its own: "a.b" and "a:b" are one template, documented.)
func FuzzBerthName(f *testing.F) {
	f.Add("app", "v1", "app.v1", "")
	f.Add("a.b", "", "a", "b")
	f.Add("a", "b.c", "a", "b.c")
	f.Fuzz(func(t *testing.T, n1, t1, n2, t2 string) {
		b1, err1 := berthName(n1, t1)
		b2, err2 := berthName(n2, t2)
		if err1 != nil || err2 != nil {
			return
		}
		if !sandbox.ValidName(b1) {
			t.Fatalf("%q:%q -> invalid %q", n1, t1, b1)
		}
		tagged := func(tag string) bool { return tag != "" && tag != defaultTag }
		if b1 == b2 && tagged(t1) == tagged(t2) && (n1 != n2 || tagged(t1) && t1 != t2) {
			t.Fatalf("%q:%q and %q:%q both %q", n1, t1, n2, t2, b1)
		}
	})
}

// TestBuildRecordsSurviveRestart: the door's build records, read back by
// a new door state: an ended build keeps its status and log, one in
// progress ends as an error saying the daemon stopped, a waiting one
// waits, an unreadable record is removed.
func TestBuildRecordsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := newTplState("", dir, log)
	now := time.Now()
	mk := func(status string) *tplBuild {
		b := &tplBuild{id: newBuildID(), templateID: "app", target: "app.v1", tags: []string{"v1"}, tenant: "acme", status: status, created: now,
			logs: []logEntry{{Timestamp: now, Level: "info", Message: "step 1 of " + status}}}
		if status == "ready" {
			b.ended = now
		}
		s.mu.Lock()
		s.builds[b.id] = b
		s.mu.Unlock()
		s.save(b)
		return b
	}
	ready, building, waiting := mk("ready"), mk("building"), mk("waiting")
	if err := os.WriteFile(filepath.Join(dir, "junk.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A record of a valid id without its tags (a start would index them).
	noTags := newBuildID()
	if err := os.WriteFile(filepath.Join(dir, noTags+".json"), []byte(`{"id":"`+noTags+`","tenant":"acme","target":"x","status":"waiting"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s.close()

	s2 := newTplState("", dir, log)
	defer s2.close()
	get := func(id string) *tplBuild {
		b := s2.builds[id]
		if b == nil {
			t.Fatalf("build %s not read back", id)
		}
		return b
	}
	if b := get(ready.id); b.status != "ready" || len(b.logs) != 1 || b.target != "app.v1" || b.tenant != "acme" || !b.ended.Equal(ready.ended) {
		t.Errorf("ready build: %+v", b)
	}
	if b := get(building.id); b.status != "error" || b.reason == nil || b.reason.Message != interruptedReason || len(b.logs) != 2 || b.ended.IsZero() {
		t.Errorf("interrupted build: %+v", b)
	}
	if b := get(waiting.id); b.status != "waiting" {
		t.Errorf("waiting build: %+v", b)
	}
	for _, f := range []string{"junk.json", noTags + ".json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
			t.Errorf("unreadable record %s kept: %v", f, err)
		}
	}
	// The interrupted build's new state is on disk too.
	s3 := newTplState("", dir, log)
	defer s3.close()
	if b := s3.builds[building.id]; b == nil || b.status != "error" || len(b.logs) != 2 {
		t.Errorf("the interrupted build read again: %+v", b)
	}
	// A forgotten build's record goes.
	s3.mu.Lock()
	s3.forget(ready.id)
	s3.mu.Unlock()
	if _, err := os.Stat(filepath.Join(dir, ready.id+".json")); !os.IsNotExist(err) {
		t.Errorf("forgotten build's record kept: %v", err)
	}
}
