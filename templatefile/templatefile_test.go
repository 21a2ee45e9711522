package templatefile

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const full = `name: py
from: base
steps:
  - run: apk add python3
  - copy: {src: ./app, dst: /app}
  - copy:
      src: "requirements.txt"
      dst: /app/requirements.txt
  - env: {A: "1"}
  - env: {}
  - workdir: /app
resources: {cpus: 1.5, memory: 256Mi, pids: 128, disk: 1G}
timeout: 1h
policy: {idle_timeout: 15m, on_idle: pause, max_age: 24h, on_max_age: stop, retention: 1h, auto_resume: true}
network: {mode: egress, allow: [pypi.org, 10.0.0.0/8]}
pool: {min: 2}
service: {cmd: [python3, -m, http.server, "8000"], restart: always, max_restarts: 5, env: {A: b}, dir: /app, user: "1000"}
`

func TestParse(t *testing.T) {
	f, err := Parse([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	if f.Name != "py" || f.From != "base" || len(f.Steps) != 6 || f.Resources.CPUs != 1.5 || f.Resources.Memory != "256Mi" ||
		f.Policy.OnIdle != "pause" || !f.Policy.AutoResume || f.Network.Mode != "egress" || f.Pool.Min != 2 ||
		f.Service == nil || len(f.Service.Cmd) != 4 || f.Service.Restart != "always" || f.Service.MaxRestarts != 5 || f.Service.Dir != "/app" {
		t.Errorf("parsed %+v", f)
	}
	if f.Steps[4].Env == nil {
		t.Error("an empty env step is not a step")
	}
	if got := f.CopySources(); !slices.Equal(got, []string{"./app", "requirements.txt"}) {
		t.Errorf("copy sources %q", got)
	}
	// JSON is a template file too.
	j, err := Parse([]byte(`{"name": "py", "image": "alpine:3.20", "steps": [{"run": "x"}, {"copy": {"src": "a/b", "dst": "/b"}}]}`))
	if err != nil || j.Image != "alpine:3.20" || !slices.Equal(j.CopySources(), []string{"a/b"}) {
		t.Fatalf("json: %+v, %v", j, err)
	}
	if f, err := Parse([]byte("name: x\nfrom: base\n")); err != nil || len(f.CopySources()) != 0 {
		t.Errorf("no steps: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []string // substrings of the error, each
	}{
		{"", []string{"empty"}},
		{"steps: [\n  - {", []string{"not a valid template file", "line"}},
		{"name: x\nfrom: base\nfoo: 1\n", []string{"line 3", "unknown field foo"}},
		{"name: x\nfrom: base\nsteps: [{copy: ./a}]\n", []string{"line 3", "copy {src: PATH, dst: PATH}"}},
		{"name: x\nfrom: base\nsteps: [{copy: {src: a, dst: /b, mode: 1}}]\n", []string{"unknown field mode"}},
		{"name: x\nfrom: base\nresources: {cpus: lots}\n", []string{"line 3", "cannot unmarshal"}},
		{"name: x\nname: y\nfrom: base\n", []string{"line 2", "already defined"}},
		{"name: x\nfrom: base\n---\nname: y\n", []string{"line 3", "second YAML document"}},
		{"from: base\n", []string{"name: missing"}},
		{"name: -x\nfrom: base\n", []string{"line 1: name:", "not a valid name"}},
		{"name: x\n", []string{"exactly one of from"}},
		{"name: x\nfrom: a\nimage: b\n", []string{"line 2: from: give exactly one"}},
		{"name: x\nfrom: base\nsteps:\n  - run: a\n    workdir: /b\n", []string{"line 4: step 1: give exactly one of run, copy, env, workdir"}},
		{"name: x\nfrom: base\nsteps:\n  - {}\n", []string{"step 1: give exactly one"}},
		{"name: x\nfrom: base\nsteps:\n  - run: a\n  - copy: {dst: /x}\n", []string{"line 5: step 2: copy.src: missing"}},
		{"name: x\nfrom: base\nsteps:\n  - copy: {src: ../x, dst: /x}\n", []string{"step 1: copy.src", "leads out of"}},
		{"name: x\nfrom: base\nsteps:\n  - copy: {src: /etc, dst: /x}\n", []string{"must be relative"}},
		{"name: x\nfrom: base\nsteps:\n  - copy: {src: a, dst: x}\n", []string{"line 4: step 1: copy.dst: want an absolute path"}},
		{"name: x\nfrom: base\nsteps:\n  - env: {\"A=B\": c}\n", []string{"step 1: env: bad name"}},
		{"name: x\nfrom: base\nsteps:\n  - workdir: rel\n", []string{"step 1: workdir: want an absolute path"}},
		{"name: x\nfrom: base\nresources:\n  memory: lots\n", []string{"line 4: resources.memory: bad size"}},
		{"name: x\nfrom: base\nresources: {cpus: .inf}\n", []string{"resources.cpus: want a number"}},
		{"name: x\nfrom: base\nresources: {disk: -1G}\n", []string{"resources.disk: bad size"}},
		{"name: x\nfrom: base\ntimeout: forever\n", []string{"line 3: timeout:", "want a duration"}},
		{"name: x\nfrom: base\ntimeout: 1000h\n", []string{"timeout:", "at most"}},
		{"name: x\nfrom: base\npolicy: {max_age: soon}\n", []string{"line 3: policy.max_age:"}},
		{"name: x\nfrom: base\nnetwork: {mode: open}\n", []string{"network.mode: must be none or egress"}},
		{"name: x\nfrom: base\npool: {min: 257}\n", []string{"pool.min: must be between 0 and 256"}},
		{"name: x\nfrom: base\npool: {min: -1}\n", []string{"pool.min"}},
		{"name: x\nfrom: base\nservice: {restart: always}\n", []string{"line 3: service: give exactly one of cmd and from_image"}},
		{"name: x\nfrom: base\nservice: {cmd: [a], from_image: true}\n", []string{"service: give exactly one"}},
		{"name: x\nfrom: base\nservice: {cmd: [a], restart: sometimes}\n", []string{"service.restart: must be always, on-failure or never"}},
		{"name: x\nfrom: base\nservice: {cmd: [a], max_restarts: 1001}\n", []string{"service.max_restarts"}},
		{"name: x\nfrom: base\nservice: {cmd: [a], dir: rel}\n", []string{"service.dir: want an absolute path"}},
		{"name: x\nfrom: base\nservice: {cmd: [a, \"\"]}\n", []string{"service.cmd"}},
		{"name: x\nfrom: base\nservice: {cmd: [a], bogus: 1}\n", []string{"unknown field bogus"}},
		// Every problem at once, in the file's order.
		{"name: -x\nsteps:\n  - workdir: a\n", []string{"name:", "exactly one of from", "step 1: workdir"}},
	} {
		_, err := Parse([]byte(tc.file))
		if err == nil {
			t.Errorf("%q: accepted", tc.file)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: err = %v, want %q", tc.file, err, w)
			}
		}
		if strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "templatefile.") {
			t.Errorf("%q: err %q is not one line in the file's terms", tc.file, err)
		}
	}
	big := bytes.Repeat([]byte("#"), MaxSize+1)
	if _, err := Parse(big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("large file: %v", err)
	}
	many := "name: x\nfrom: base\nsteps:\n" + strings.Repeat("  - run: a\n", MaxSteps+1)
	if _, err := Parse([]byte(many)); err == nil || !strings.Contains(err.Error(), "at most 128 steps") {
		t.Errorf("too many steps: %v", err)
	}
}

func TestErrorsListEveryProblemOnce(t *testing.T) {
	var es Errors
	_, err := Parse([]byte("name: x\nfrom: base\nsteps:\n" + strings.Repeat("  - workdir: a\n", 10)))
	if !errors.As(err, &es) || len(es) != 10 || es[0].Step != 1 || es[0].Line != 4 || es[9].Line != 13 {
		t.Fatalf("errors = %#v", err)
	}
	if !strings.Contains(err.Error(), "and 2 more") {
		t.Errorf("long list not cut: %v", err)
	}
}

func TestSourceName(t *testing.T) {
	for src, want := range map[string]string{"./app/": "app", "a//b": "a/b", ".": ".", "a/../b": "b"} {
		if got, err := SourceName(src); err != nil || got != want {
			t.Errorf("%q = %q, %v; want %q", src, got, err, want)
		}
	}
	for src, want := range map[string]string{"/etc/passwd": "must be relative", `\x`: "must be relative",
		"..": "leads out of", "../x": "leads out of", "a/../../x": "leads out of", "": "missing"} {
		if _, err := SourceName(src); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", src, err, want)
		}
	}
}

// A step's JSON is part of the daemon's build cache key: a change would
// rebuild every applied template's layers.
func TestStepJSON(t *testing.T) {
	for _, tc := range []struct {
		st   Step
		want string
	}{
		{Step{Run: "apk add x"}, `{"run":"apk add x"}`},
		{Step{Copy: &CopyStep{Src: "./a", Dst: "/a"}}, `{"copy":{"src":"./a","dst":"/a"}}`},
		{Step{Env: map[string]string{"B": "2", "A": "1"}}, `{"env":{"A":"1","B":"2"}}`},
		{Step{Env: map[string]string{}}, `{}`},
		{Step{Workdir: "/w"}, `{"workdir":"/w"}`},
	} {
		if b, _ := json.Marshal(tc.st); string(b) != tc.want {
			t.Errorf("%+v = %s, want %s", tc.st, b, tc.want)
		}
	}
}

func TestMarshalRoundTrips(t *testing.T) {
	f, err := Parse([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	g, err := Parse(b)
	if err != nil {
		t.Fatalf("%v in\n%s", err, b)
	}
	f.node, g.node = nil, nil
	if !reflect.DeepEqual(f, g) {
		t.Errorf("round trip changed the file:\n%+v\n%+v\n%s", f, g, b)
	}
}

// FuzzParse: whatever Parse accepts is valid and written back by Marshal
// as a file Parse accepts, which Marshal writes the same way again.
func FuzzParse(f *testing.F) {
	f.Add(full)
	f.Add(`{"name": "py", "image": "alpine", "steps": [{"env": {}}, {"copy": {"src": ".", "dst": "/"}}]}`)
	f.Add("name: x\nfrom: base\nsteps:\n  - run: |\n      echo a\n      echo b\n")
	f.Add("name: x\nfrom: base\nresources: {cpus: .nan, memory: 1k}\n")
	f.Add("name: x\nfrom: base\nsteps: [{run: a, workdir: /b}]\n")
	f.Add("name: x\nfrom: base\nservice: {cmd: [python3, -m, http.server], restart: always, env: {A: b}, dir: /w}\n")
	f.Add("name: x\nimage: alpine\nservice: {from_image: true, max_restarts: 3}\n")
	f.Add("name: x\nfrom: base\nsteps: [{user: {name: dev, uid: 1000, gid: 2000, home: /home/dev, shell: /bin/sh, default: true}}]\n")
	f.Add("name: x\nfrom: base\nsteps: [{user: {name: Dev, uid: 0, home: 'a:b'}}]\n")
	f.Fuzz(func(t *testing.T, s string) {
		tf, err := Parse([]byte(s))
		if err != nil {
			return
		}
		if err := tf.Validate(); err != nil {
			t.Fatalf("accepted, then invalid: %v", err)
		}
		b, err := tf.Marshal()
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		tf2, err := Parse(b)
		if err != nil {
			t.Fatalf("written back as a file Parse refuses: %v\n%s", err, b)
		}
		b2, err := tf2.Marshal()
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("round trip differs (%v):\n%s\n%s", err, b, b2)
		}
		if !slices.Equal(tf.CopySources(), tf2.CopySources()) || len(tf.Steps) != len(tf2.Steps) {
			t.Fatalf("steps changed: %+v / %+v", tf.Steps, tf2.Steps)
		}
	})
}

// TestUserStep: a user step parses with its defaults, and each bad field
// is reported by name.
func TestUserStep(t *testing.T) {
	f, err := Parse([]byte("name: x\nfrom: base\nsteps:\n  - user: {name: dev, uid: 1000, default: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	u := f.Steps[0].User.WithDefaults()
	if u.Name != "dev" || u.UID != 1000 || u.GID != 1000 || u.Home != "/home/dev" || u.Shell != "/bin/sh" || !u.Default {
		t.Errorf("user step with defaults = %+v", u)
	}
	for _, tc := range []struct{ step, field string }{
		{"{name: Dev, uid: 1000}", "user.name"},
		{"{name: dev, uid: 0}", "user.uid"},
		{"{name: dev, uid: 65534}", "user.uid"},
		{"{name: dev, uid: 1000, gid: -1}", "user.gid"},
		{"{name: dev, uid: 1000, home: rel}", "user.home"},
		{"{name: dev, uid: 1000, home: '/a:b'}", "user.home"},
		{"{name: dev, uid: 1000, shell: /bin/../sh}", "user.shell"},
	} {
		_, err := Parse([]byte("name: x\nfrom: base\nsteps:\n  - user: " + tc.step + "\n"))
		if err == nil || !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), "step 1") {
			t.Errorf("user %s: err = %v, want one naming step 1 and %s", tc.step, err, tc.field)
		}
	}
	if _, err := Parse([]byte("name: x\nfrom: base\nsteps:\n  - {run: a, user: {name: dev, uid: 1}}\n")); err == nil {
		t.Error("a step with run and user was accepted")
	}
}
