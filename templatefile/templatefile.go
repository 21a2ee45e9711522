// Package templatefile is the format of berth's template files, the
// declarative templates of `berth apply -f FILE`: YAML (or JSON, which is
// YAML too) naming a base, setup steps, and defaults for the template's
// sandboxes. The CLI and the daemon read files with the same Parse, so a
// file the CLI accepts is one the daemon accepts, with the same errors.
//
//	name: py
//	from: base                # a template, or image: a registry reference
//	steps:
//	  - run: mkdir -p /app
//	  - {run: pip install -r /app/req.txt, network: egress, allow: [pypi.org:443, files.pythonhosted.org:443]}
//	  - copy: {src: ./app, dst: /app}   # src: sent with the file, relative to it
//	  - env: {PYTHONUNBUFFERED: "1"}
//	  - workdir: /app
//	  - user: {name: dev, uid: 1000, home: /home/dev, default: true}   # passwd, group, home; the default user
//	resources: {cpus: 1, memory: 512Mi, pids: 256, disk: 1Gi}
//	timeout: 1h
//	policy: {idle_timeout: 15m, on_idle: pause, max_age: 24h, on_max_age: stop, retention: 1h, auto_resume: true}
//	network: {mode: egress, allow: [pypi.org]}
//	pool: {min: 2}
//	service: {cmd: [python3, -m, http.server, "8000"], restart: always}  # or {from_image: true}
//
// Parse checks what the file alone decides (shape, names, sizes,
// durations, paths); the daemon then checks what depends on it (the base
// exists, resources fit the host, the egress rules parse, the policy
// actions).
package templatefile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/berth-sh/berth/internal/sandbox"
)

// Limits of a template file.
const (
	MaxSize    = 1 << 20 // bytes of the file
	MaxSteps   = 128
	MaxPoolMin = 256 // pool.min; the daemon's cap on any pool
)

// File is a template file.
type File struct {
	Name      string     `yaml:"name,omitempty" json:"name"`
	From      string     `yaml:"from,omitempty" json:"from"`         // a template
	Image     string     `yaml:"image,omitempty" json:"image"`       // or a registry reference
	Insecure  bool       `yaml:"insecure,omitempty" json:"insecure"` // plain-HTTP registry
	Steps     []Step     `yaml:"steps,omitempty" json:"steps"`
	Resources *Resources `yaml:"resources,omitempty" json:"resources"` // defaults for the template's sandboxes
	Timeout   string     `yaml:"timeout,omitempty" json:"timeout"`     // a duration
	Policy    *Policy    `yaml:"policy,omitempty" json:"policy"`
	Network   *Network   `yaml:"network,omitempty" json:"network"`
	Pool      *Pool      `yaml:"pool,omitempty" json:"pool"`
	Service   *Service   `yaml:"service,omitempty" json:"service"` // a supervised service of every sandbox

	node *yaml.Node // the parsed document, for the lines of errors
}

// Resources are a template's default resources; zero leaves berth's.
type Resources struct {
	CPUs   float64 `yaml:"cpus,omitempty" json:"cpus"`
	Memory string  `yaml:"memory,omitempty" json:"memory"` // a size: 512Mi, 1G, bytes
	Pids   int64   `yaml:"pids,omitempty" json:"pids"`
	Disk   string  `yaml:"disk,omitempty" json:"disk"` // cap of the writable root layer and /tmp
}

// Policy is a template's default lifecycle policy; durations as strings.
type Policy struct {
	IdleTimeout string `yaml:"idle_timeout,omitempty" json:"idle_timeout"`
	OnIdle      string `yaml:"on_idle,omitempty" json:"on_idle"`
	MaxAge      string `yaml:"max_age,omitempty" json:"max_age"`
	OnMaxAge    string `yaml:"on_max_age,omitempty" json:"on_max_age"`
	Retention   string `yaml:"retention,omitempty" json:"retention"`
	AutoResume  bool   `yaml:"auto_resume,omitempty" json:"auto_resume"`
}

// Network is a template's default network.
type Network struct {
	Mode  string   `yaml:"mode,omitempty" json:"mode"` // none or egress
	Allow []string `yaml:"allow,omitempty" json:"allow"`
}

// Service is a command berth runs, supervised, in every sandbox of the
// template whenever it becomes running: cmd, or with from_image the
// image's entrypoint and cmd. restart is always, on-failure (default) or
// never.
type Service struct {
	Cmd         []string          `yaml:"cmd,omitempty" json:"cmd"`
	FromImage   bool              `yaml:"from_image,omitempty" json:"from_image"`
	Restart     string            `yaml:"restart,omitempty" json:"restart"`
	MaxRestarts int               `yaml:"max_restarts,omitempty" json:"max_restarts"`
	Env         map[string]string `yaml:"env,omitempty" json:"env"`
	Dir         string            `yaml:"dir,omitempty" json:"dir"`
	User        string            `yaml:"user,omitempty" json:"user"`
}

// Pool asks for warm sandboxes of the template.
type Pool struct {
	Min int `yaml:"min,omitempty" json:"min"`
}

// Step is one setup step: exactly one field is set. Its JSON encoding is
// part of the daemon's build cache key: do not change it.
type Step struct {
	Run     string            `yaml:"run,omitempty" json:"run,omitempty"`
	Copy    *CopyStep         `yaml:"copy,omitempty" json:"copy,omitempty"`
	Env     map[string]string `yaml:"env,omitempty" json:"env,omitempty"`
	Workdir string            `yaml:"workdir,omitempty" json:"workdir,omitempty"`
	User    *UserStep         `yaml:"user,omitempty" json:"user,omitempty"`
	// Network and Allow give a run step a network: mode none (the
	// default: loopback only) or egress with allow rules, under the same
	// egress policy and flow log as a sandbox's.
	Network string   `yaml:"network,omitempty" json:"network,omitempty"`
	Allow   []string `yaml:"allow,omitempty" json:"allow,omitempty"`
}

// UserStep adds a user to the image: a line in /etc/passwd, one in
// /etc/group (unless its group exists) and a home directory it owns.
// Default makes it the template's default user (the one commands run as
// and /workspace belongs to).
type UserStep struct {
	Name    string `yaml:"name" json:"name"`
	UID     int    `yaml:"uid" json:"uid"`
	GID     int    `yaml:"gid,omitempty" json:"gid,omitempty"`     // default: the uid
	Home    string `yaml:"home,omitempty" json:"home,omitempty"`   // default: /home/NAME
	Shell   string `yaml:"shell,omitempty" json:"shell,omitempty"` // default: /bin/sh
	Default bool   `yaml:"default,omitempty" json:"default,omitempty"`
}

// MaxUserID bounds a user step's uid and gid: a sandbox maps ids below
// 65536, and 65534 is nobody.
const MaxUserID = 65533

var userNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

// WithDefaults returns u with its defaults filled in.
func (u *UserStep) WithDefaults() *UserStep {
	c := *u
	if c.GID == 0 {
		c.GID = c.UID
	}
	if c.Home == "" {
		c.Home = "/home/" + c.Name
	}
	if c.Shell == "" {
		c.Shell = "/bin/sh"
	}
	return &c
}

func (u *UserStep) validate(bad func(field, format string, args ...any)) {
	if !userNameRE.MatchString(u.Name) {
		bad("user.name", "%q is not a user name (a lower-case letter or _, then up to 31 of a-z 0-9 _ -)", u.Name)
	}
	if u.UID < 1 || u.UID > MaxUserID {
		bad("user.uid", "want 1 to %d, not %d", MaxUserID, u.UID)
	}
	if u.GID < 0 || u.GID > MaxUserID {
		bad("user.gid", "want 1 to %d, not %d", MaxUserID, u.GID)
	}
	for _, p := range []struct{ field, v string }{{"user.home", u.Home}, {"user.shell", u.Shell}} {
		if p.v != "" && (!strings.HasPrefix(p.v, "/") || path.Clean(p.v) != p.v || p.v == "/" ||
			strings.ContainsAny(p.v, ":\n") || sandbox.CheckText(p.field, p.v) != nil) {
			bad(p.field, "want a clean absolute path without ':', not %q", p.v)
		}
	}
}

// CopyStep copies files sent with the template file into the image.
type CopyStep struct {
	Src string `yaml:"src" json:"src"` // relative to the template file's directory, inside it
	Dst string `yaml:"dst" json:"dst"` // absolute; a trailing / copies a file into it
}

// ErrTooLarge is the category of a file over MaxSize.
var ErrTooLarge = errors.New("template file too large")

// Error is one problem of a template file: where it is and what is wrong.
type Error struct {
	Line  int    // 1-based; 0 when the place is not in the file (a missing field)
	Step  int    // 1-based step number, 0 outside the steps
	Field string // e.g. "name", "copy.src", "resources.memory"
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Step > 0 {
		fmt.Fprintf(&b, "step %d: ", e.Step)
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors are all the problems Validate found, in the file's order.
type Errors []*Error

func (es Errors) Error() string {
	const shown = 8
	parts := make([]string, 0, min(len(es), shown)+1)
	for i, e := range es {
		if i == shown {
			parts = append(parts, fmt.Sprintf("and %d more", len(es)-shown))
			break
		}
		parts = append(parts, e.Error())
	}
	return strings.Join(parts, "; ")
}

// Parse reads a template file and validates it.
func Parse(data []byte) (*File, error) {
	f, err := Decode(data)
	if err != nil {
		return nil, err
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return f, nil
}

// Decode reads a template file without validating it: only its syntax,
// its fields (unknown ones are refused) and their types are checked.
func Decode(data []byte) (*File, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%w: over %d bytes", ErrTooLarge, MaxSize)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			return nil, &Error{Msg: "the file is empty"}
		}
		return nil, yamlError(err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); err != io.EOF {
		if err != nil {
			return nil, yamlError(err)
		}
		return nil, &Error{Line: next.Line, Msg: "a second YAML document: a template file is one"}
	}
	var f File
	dec = yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, yamlError(err)
	}
	f.node = &doc
	return &f, nil
}

var (
	unknownField = regexp.MustCompile(`field (\S+) not found in type \S+`)
	goTypes      = strings.NewReplacer(
		"templatefile.File", "a template file", "templatefile.Step", "a step ({run: CMD}, {copy: ...}, {env: ...}, {workdir: DIR} or {user: ...})",
		"templatefile.UserStep", "user {name, uid, gid, home, shell, default}",
		"templatefile.CopyStep", "copy {src: PATH, dst: PATH}", "templatefile.Resources", "resources {cpus, memory, pids, disk}",
		"templatefile.Policy", "a policy", "templatefile.Network", "network {mode, allow}", "templatefile.Pool", "pool {min}",
		"map[string]string", "a map of strings", "[]templatefile.Step", "a list of steps", "[]string", "a list of strings")
)

// yamlError turns the YAML library's message into one line in the
// file's terms.
func yamlError(err error) error {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	for i, m := range msgs {
		m = unknownField.ReplaceAllString(m, "unknown field $1")
		msgs[i] = goTypes.Replace(m)
	}
	return fmt.Errorf("not a valid template file: %s", strings.Join(msgs, "; "))
}

// Marshal writes f as (indented) JSON, which is YAML too: Parse reads it
// back to the same file. (Not YAML's own styles: the YAML library does not
// always read its block scalars back as it wrote them.)
func (f *File) Marshal() ([]byte, error) {
	type fields File // without the methods
	steps := make([]stepOut, len(f.Steps))
	for i, st := range f.Steps {
		steps[i] = stepOut(st)
	}
	return json.MarshalIndent(struct {
		*fields
		Steps []stepOut `json:"steps,omitempty"`
	}{(*fields)(f), steps}, "", "  ")
}

// stepOut is a step as Marshal writes it: an empty env is kept (Step's
// own JSON, the cache key's, drops it).
type stepOut Step

func (s stepOut) MarshalJSON() ([]byte, error) {
	if s.Env != nil && len(s.Env) == 0 {
		return []byte(`{"env":{}}`), nil
	}
	return json.Marshal(Step(s))
}

// CopySources returns the src of every copy step, in order.
func (f *File) CopySources() []string {
	var srcs []string
	for _, st := range f.Steps {
		if st.Copy != nil {
			srcs = append(srcs, st.Copy.Src)
		}
	}
	return srcs
}

// SourceName checks the src of a copy step and returns its name among the
// files sent with the template file (and under the file's directory): the
// cleaned, slash-separated relative path.
func SourceName(src string) (string, error) {
	if src == "" {
		return "", errors.New("missing")
	}
	if path.IsAbs(src) || filepath.IsAbs(src) || strings.HasPrefix(src, `\`) {
		return "", fmt.Errorf("%q must be relative to the template file's directory", src)
	}
	name := path.Clean(filepath.ToSlash(src))
	if name == ".." || strings.HasPrefix(name, "../") {
		return "", fmt.Errorf("%q leads out of the template file's directory", src)
	}
	return name, nil
}

// Validate checks everything the file alone decides and reports every
// problem found (as Errors), each with its line when it is in the file.
func (f *File) Validate() error {
	var errs Errors
	bad := func(step int, field string, format string, args ...any) {
		var at []any
		if step > 0 {
			at = []any{"steps", step - 1}
		}
		for _, p := range strings.Split(field, ".") {
			if p != "" {
				at = append(at, p)
			}
		}
		errs = append(errs, &Error{Line: f.line(at...), Step: step, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	switch {
	case f.Name == "":
		bad(0, "name", "missing")
	case !sandbox.ValidName(f.Name):
		bad(0, "name", "%q is not a valid name (letters, digits, _ . -, at most 63, starting with a letter or digit)", f.Name)
	}
	if (f.From == "") == (f.Image == "") {
		field := "from"
		if f.From == "" {
			field = ""
		}
		bad(0, field, "give exactly one of from (a template) and image (a registry reference)")
	}
	if len(f.Steps) > MaxSteps {
		bad(0, "steps", "at most %d steps, not %d", MaxSteps, len(f.Steps))
	}
	for i, st := range f.Steps {
		n, set := i+1, 0
		if st.Run != "" {
			set++
		}
		if c := st.Copy; c != nil {
			set++
			if _, err := SourceName(c.Src); err != nil {
				bad(n, "copy.src", "%v", err)
			}
			if !strings.HasPrefix(c.Dst, "/") {
				bad(n, "copy.dst", "want an absolute path, not %q", c.Dst)
			}
		}
		if st.Env != nil {
			set++
			for k := range st.Env {
				if k == "" || strings.ContainsAny(k, "=\x00") {
					bad(n, "env", "bad name %q", k)
				}
			}
		}
		if st.Workdir != "" {
			set++
			if !strings.HasPrefix(st.Workdir, "/") {
				bad(n, "workdir", "want an absolute path, not %q", st.Workdir)
			}
		}
		if st.User != nil {
			set++
			st.User.validate(func(field, format string, args ...any) { bad(n, field, format, args...) })
		}
		if set != 1 {
			bad(n, "", "give exactly one of run, copy, env, workdir, user")
		}
		if (st.Network != "" || len(st.Allow) > 0) && st.Run == "" {
			bad(n, "network", "only a run step takes a network")
		}
		switch st.Network {
		case "", "none", "egress":
		default:
			bad(n, "network", "want none or egress, not %q", st.Network)
		}
		if len(st.Allow) > 0 && st.Network != "egress" {
			bad(n, "allow", "allow rules need network: egress")
		}
		for _, a := range st.Allow {
			if err := sandbox.CheckText("allow rule", a); err != nil || a == "" {
				bad(n, "allow", "bad rule %q", a)
			}
		}
	}
	if r := f.Resources; r != nil {
		if math.IsNaN(r.CPUs) || math.IsInf(r.CPUs, 0) {
			bad(0, "resources.cpus", "want a number")
		}
		for _, s := range []struct{ field, v string }{{"resources.memory", r.Memory}, {"resources.disk", r.Disk}} {
			if s.v == "" {
				continue
			}
			if _, err := ParseSize(s.v); err != nil {
				bad(0, s.field, "%v", err)
			}
		}
	}
	if f.Timeout != "" {
		if d, err := time.ParseDuration(f.Timeout); err != nil || d < 0 || d > sandbox.MaxTimeout {
			bad(0, "timeout", "%q: want a duration such as 1h, at most %s", f.Timeout, sandbox.MaxTimeout)
		}
	}
	if p := f.Policy; p != nil {
		for _, d := range []struct{ field, v string }{
			{"policy.idle_timeout", p.IdleTimeout}, {"policy.max_age", p.MaxAge}, {"policy.retention", p.Retention}} {
			if d.v == "" {
				continue
			}
			if _, err := time.ParseDuration(d.v); err != nil {
				bad(0, d.field, "%q: want a duration such as 15m", d.v)
			}
		}
	}
	if n := f.Network; n != nil && n.Mode != "" && n.Mode != "none" && n.Mode != "egress" {
		bad(0, "network.mode", "must be none or egress, not %q", n.Mode)
	}
	if p := f.Pool; p != nil && (p.Min < 0 || p.Min > MaxPoolMin) {
		bad(0, "pool.min", "must be between 0 and %d", MaxPoolMin)
	}
	if sv := f.Service; sv != nil {
		if (len(sv.Cmd) == 0) == !sv.FromImage {
			bad(0, "service", "give exactly one of cmd and from_image")
		}
		for _, a := range sv.Cmd {
			if a == "" || strings.IndexByte(a, 0) >= 0 {
				bad(0, "service.cmd", "arguments must be non-empty and without NUL bytes")
				break
			}
		}
		switch sv.Restart {
		case "", "always", "on-failure", "never":
		default:
			bad(0, "service.restart", "must be always, on-failure or never, not %q", sv.Restart)
		}
		if sv.MaxRestarts < 0 || sv.MaxRestarts > 1000 {
			bad(0, "service.max_restarts", "must be between 0 and 1000")
		}
		if sv.Dir != "" && !strings.HasPrefix(sv.Dir, "/") {
			bad(0, "service.dir", "want an absolute path, not %q", sv.Dir)
		}
		for k := range sv.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				bad(0, "service.env", "bad name %q", k)
			}
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// line returns the line of the node at path (field names and list
// indexes) in the parsed document, or of the deepest part of it there is;
// 0 for a file that was not parsed.
func (f *File) line(at ...any) int {
	if f.node == nil || len(f.node.Content) == 0 {
		return 0
	}
	n, line := f.node.Content[0], 0
	for _, p := range at {
		var next *yaml.Node
		switch p := p.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == p {
						line, next = n.Content[i].Line, n.Content[i+1]
						break
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && p < len(n.Content) {
				next = n.Content[p]
				line = next.Line
			}
		}
		if next == nil {
			break
		}
		n = next
	}
	return line
}

// ParseSize reads sizes such as 512Mi, 1G, 256m or plain bytes; every
// unit is binary (k = Ki = 1024).
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	lower := strings.ToLower(s)
	for _, u := range []struct {
		suf string
		m   int64
	}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"ki", 1 << 10}, {"mi", 1 << 20}, {"gi", 1 << 30},
		{"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30}, {"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}} {
		if strings.HasSuffix(lower, u.suf) {
			mult, lower = u.m, strings.TrimSuffix(lower, u.suf)
			break
		}
	}
	var n int64
	if _, err := fmt.Sscan(lower, &n); err != nil || n <= 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}
