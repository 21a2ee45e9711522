package manager

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// TemplateFile is a declarative template (berth apply -f FILE).
type TemplateFile struct {
	Name     string `yaml:"name" json:"name"`
	From     string `yaml:"from" json:"from"`         // a template
	Image    string `yaml:"image" json:"image"`       // or a registry reference
	Insecure bool   `yaml:"insecure" json:"insecure"` // plain-HTTP registry
	Steps    []Step `yaml:"steps" json:"steps"`
	// Defaults for sandboxes of the template.
	Resources *struct {
		CPUs   float64 `yaml:"cpus" json:"cpus"`
		Memory string  `yaml:"memory" json:"memory"`
		Pids   int64   `yaml:"pids" json:"pids"`
		Disk   string  `yaml:"disk" json:"disk"` // cap of the writable root layer and /tmp
	} `yaml:"resources" json:"resources"`
	Timeout string `yaml:"timeout" json:"timeout"`
	Policy  *struct {
		IdleTimeout string `yaml:"idle_timeout" json:"idle_timeout"`
		OnIdle      string `yaml:"on_idle" json:"on_idle"`
		MaxAge      string `yaml:"max_age" json:"max_age"`
		OnMaxAge    string `yaml:"on_max_age" json:"on_max_age"`
		Retention   string `yaml:"retention" json:"retention"`
		AutoResume  bool   `yaml:"auto_resume" json:"auto_resume"`
	} `yaml:"policy" json:"policy"`
	Network *struct {
		Mode  string   `yaml:"mode" json:"mode"`
		Allow []string `yaml:"allow" json:"allow"`
	} `yaml:"network" json:"network"`
	Pool *struct {
		Min int `yaml:"min" json:"min"`
	} `yaml:"pool" json:"pool"`
}

// Step is one setup step: exactly one field is set.
type Step struct {
	Run     string            `yaml:"run,omitempty" json:"run,omitempty"`
	Copy    *CopyStep         `yaml:"copy,omitempty" json:"copy,omitempty"`
	Env     map[string]string `yaml:"env,omitempty" json:"env,omitempty"`
	Workdir string            `yaml:"workdir,omitempty" json:"workdir,omitempty"`
}

// CopyStep copies files sent with the template file into the image.
type CopyStep struct {
	Src string `yaml:"src" json:"src"`
	Dst string `yaml:"dst" json:"dst"`
}

// Limits of a template file.
const (
	maxTemplateFile  = 1 << 20
	maxTemplateSteps = 128
)

// ParseTemplateFile reads and checks a template file (YAML or JSON).
func ParseTemplateFile(data []byte) (*TemplateFile, error) {
	if len(data) > maxTemplateFile {
		return nil, errdefs.TooLarge("template file exceeds %d bytes", maxTemplateFile)
	}
	var tf TemplateFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&tf); err != nil {
		return nil, errdefs.Invalid("template file: %v", err)
	}
	if !sandbox.ValidName(tf.Name) {
		return nil, errdefs.Invalid("template file: bad or missing name %q", tf.Name)
	}
	if (tf.From == "") == (tf.Image == "") {
		return nil, errdefs.Invalid("template file: give exactly one of from (a template) and image (a registry reference)")
	}
	if len(tf.Steps) > maxTemplateSteps {
		return nil, errdefs.Invalid("template file: at most %d steps", maxTemplateSteps)
	}
	for i, st := range tf.Steps {
		n := 0
		if st.Run != "" {
			n++
		}
		if st.Copy != nil {
			n++
			if st.Copy.Src == "" || !strings.HasPrefix(st.Copy.Dst, "/") {
				return nil, errdefs.Invalid("step %d: copy needs src and an absolute dst", i+1)
			}
			if c := path.Clean(st.Copy.Src); path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
				return nil, errdefs.Invalid("step %d: copy src must be relative to the template file, inside its directory", i+1)
			}
		}
		if st.Env != nil {
			n++
			for k := range st.Env {
				if k == "" || strings.ContainsAny(k, "=\x00") {
					return nil, errdefs.Invalid("step %d: bad env name %q", i+1, k)
				}
			}
		}
		if st.Workdir != "" {
			n++
			if !strings.HasPrefix(st.Workdir, "/") {
				return nil, errdefs.Invalid("step %d: workdir must be absolute", i+1)
			}
		}
		if n != 1 {
			return nil, errdefs.Invalid("step %d: give exactly one of run, copy, env, workdir", i+1)
		}
	}
	if tf.Pool != nil && (tf.Pool.Min < 0 || tf.Pool.Min > MaxPoolSize) {
		return nil, errdefs.Invalid("pool.min must be between 0 and %d", MaxPoolSize)
	}
	return &tf, nil
}

func hashOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// copyFiles returns the archive entries of one copy step's src, renamed
// relative to it, and a hash of their content for the step's cache key.
func copyFiles(files []byte, src string) ([]byte, string, bool, error) {
	src = path.Clean(src)
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	h := sha256.New()
	found, single := false, false
	tr := tar.NewReader(bytes.NewReader(files))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, "", false, errdefs.Invalid("files archive: %v", err)
		}
		name := strings.TrimSuffix(path.Clean(hdr.Name), "/")
		var rel string
		switch {
		case src == ".":
			rel = name
		case name == src:
			rel = path.Base(src)
			single = hdr.Typeflag != tar.TypeDir
			if !single {
				continue
			}
		case strings.HasPrefix(name, src+"/"):
			rel = strings.TrimPrefix(name, src+"/")
		default:
			continue
		}
		found = true
		hdr.Name = rel
		if hdr.Typeflag == tar.TypeDir {
			hdr.Name += "/"
		}
		fmt.Fprintf(h, "%s %o %d %s\n", hdr.Name, hdr.Mode, hdr.Typeflag, hdr.Linkname)
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, "", false, err
		}
		if _, err := io.Copy(io.MultiWriter(tw, h), tr); err != nil {
			return nil, "", false, err
		}
	}
	if !found {
		return nil, "", false, errdefs.Invalid("copy src %q is not among the files sent with the template file", src)
	}
	tw.Close()
	return out.Bytes(), hex.EncodeToString(h.Sum(nil)), single, nil
}

// Apply builds what changed in a declarative template: each step's result
// is cached by the hash of everything it depends on, so applying an
// unchanged file builds nothing. A changed template's warm pool rolls over.
func (m *Manager) Apply(ctx context.Context, req *api.ApplyRequest, actor string, progress func(api.BuildEvent)) (*store.Template, error) {
	tf, err := ParseTemplateFile([]byte(req.Spec))
	if err != nil {
		return nil, err
	}
	say := func(step int, format string, args ...any) {
		progress(api.BuildEvent{Step: step, Stream: "stdout", Data: []byte(fmt.Sprintf(format, args...) + "\n")})
	}
	var layers []string
	var cfg store.TemplateConfig
	if tf.From != "" {
		base, err := m.GetTemplate(ctx, tf.From)
		if err != nil {
			return nil, err
		}
		layers, cfg = slices.Clone(base.Layers), base.Config
		cfg.Env = slices.Clone(cfg.Env)
		if tf.From == tf.Name {
			return nil, errdefs.Invalid("a template cannot be built from itself")
		}
	} else {
		say(0, "--> pulling %s", tf.Image)
		img, err := m.images.Pull(ctx, tf.Image, tf.Insecure)
		if err != nil {
			return nil, err
		}
		layers = img.Layers
		cfg = store.TemplateConfig{Env: img.Config.Env, Workdir: img.Config.Workdir, User: img.Config.User, Cmd: img.Config.Cmd}
	}
	key := hashOf(append([]string{"base", fmt.Sprint(cfg.HostUsr)}, layers...)...)
	built := 0
	for i, st := range tf.Steps {
		n := i + 1
		stepJSON, _ := json.Marshal(st)
		switch {
		case st.Env != nil:
			for _, k := range slices.Sorted(maps.Keys(st.Env)) {
				cfg.Env = setEnv(cfg.Env, k, st.Env[k])
			}
			key = hashOf(key, string(stepJSON))
			say(n, "--> step %d/%d: env", n, len(tf.Steps))
			continue
		case st.Workdir != "":
			cfg.Workdir = st.Workdir
			key = hashOf(key, string(stepJSON))
			say(n, "--> step %d/%d: workdir %s", n, len(tf.Steps), st.Workdir)
			continue
		}
		var files []byte
		var single bool
		desc := "run " + st.Run
		if st.Copy != nil {
			var sum string
			if files, sum, single, err = copyFiles(req.Files, st.Copy.Src); err != nil {
				return nil, fmt.Errorf("step %d: %w", n, err)
			}
			key = hashOf(key, string(stepJSON), sum)
			desc = fmt.Sprintf("copy %s %s", st.Copy.Src, st.Copy.Dst)
		} else {
			key = hashOf(key, string(stepJSON), strings.Join(cfg.Env, "\x00"), cfg.Workdir)
		}
		if layer, err := m.store.GetBuildCache(ctx, key); err == nil && m.images.HasLayer(layer) {
			say(n, "--> step %d/%d: %s (cached)", n, len(tf.Steps), desc)
			layers = append(layers, layer)
			continue
		}
		say(n, "--> step %d/%d: %s", n, len(tf.Steps), desc)
		layer, err := m.buildLayer(ctx, layers, cfg, actor, func(sb *sandbox.Sandbox) error {
			if st.Copy != nil {
				return m.copyIntoSandbox(ctx, sb.ID, st.Copy.Dst, files, single, actor)
			}
			return m.runStep(ctx, sb.ID, n, st.Run, cfg.Workdir, 3600, actor, progress)
		})
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", n, err)
		}
		if err := m.store.PutBuildCache(ctx, key, layer); err != nil {
			return nil, err
		}
		layers = append(layers, layer)
		built++
	}
	if r := tf.Resources; r != nil {
		res := sandbox.DefaultResources
		if r.CPUs > 0 {
			res.CPUs = r.CPUs
		}
		if r.Pids > 0 {
			res.Pids = r.Pids
		}
		if r.Memory != "" {
			b, err := parseSize(r.Memory)
			if err != nil {
				return nil, errdefs.Invalid("resources.memory: %v", err)
			}
			res.MemoryBytes = b
		}
		if r.Disk != "" {
			b, err := parseSize(r.Disk)
			if err != nil {
				return nil, errdefs.Invalid("resources.disk: %v", err)
			}
			res.DiskBytes = b
		}
		if err := (&sandbox.Spec{Resources: res}).Validate(); err != nil {
			return nil, err
		}
		if err := m.checkDisk(&sandbox.Spec{Resources: res}); err != nil {
			return nil, err
		}
		cfg.Resources = &res
	}
	if tf.Timeout != "" {
		d, err := time.ParseDuration(tf.Timeout)
		if err != nil || d < 0 || d > sandbox.MaxTimeout {
			return nil, errdefs.Invalid("timeout %q: want a duration such as 1h", tf.Timeout)
		}
		cfg.Timeout = d
	}
	if p := tf.Policy; p != nil {
		var pol sandbox.Policy
		for _, f := range []struct {
			name string
			in   string
			out  *time.Duration
		}{{"idle_timeout", p.IdleTimeout, &pol.IdleTimeout}, {"max_age", p.MaxAge, &pol.MaxAge}, {"retention", p.Retention, &pol.Retention}} {
			if f.in == "" {
				continue
			}
			d, err := time.ParseDuration(f.in)
			if err != nil {
				return nil, errdefs.Invalid("policy.%s %q: want a duration such as 15m", f.name, f.in)
			}
			*f.out = d
		}
		pol.OnIdle, pol.OnMaxAge, pol.AutoResume = sandbox.Action(p.OnIdle), sandbox.Action(p.OnMaxAge), p.AutoResume
		if err := (&sandbox.Spec{Resources: sandbox.DefaultResources, Policy: pol}).Validate(); err != nil {
			return nil, err
		}
		cfg.Policy = &pol
	}
	if n := tf.Network; n != nil {
		if n.Mode != "" && n.Mode != "none" && n.Mode != "egress" {
			return nil, errdefs.Invalid("network.mode must be none or egress")
		}
		if err := m.node.CheckRules(n.Allow); err != nil {
			return nil, errdefs.Invalid("network.allow: %s", errdefs.Message(err))
		}
		cfg.Network, cfg.Allow = n.Mode, n.Allow
	}
	tpl := &store.Template{Name: tf.Name, Layers: layers, Config: cfg, Source: "apply", CreatedAt: m.now()}
	for _, l := range layers {
		tpl.Size += max(m.images.Size(l), 0)
	}
	cur, err := m.store.GetTemplate(ctx, tf.Name)
	switch {
	case err == nil && cur.Builtin:
		return nil, errdefs.Conflict("template %q is builtin", tf.Name)
	case err == nil && slices.Equal(cur.Layers, tpl.Layers) && sameConfig(cur.Config, cfg):
		say(0, "--> %s is up to date", tf.Name)
		tpl = cur
	default:
		if err := m.store.PutTemplate(ctx, tpl); err != nil {
			return nil, err
		}
		say(0, "--> %s: %d layers (%d built, %d cached)", tf.Name, len(layers), built, len(tf.Steps)-built)
	}
	if tf.Pool != nil {
		if _, err := m.SetPool(ctx, tf.Name, tf.Pool.Min); err != nil {
			return nil, err
		}
	}
	m.wakeReconciler() // a changed template rolls its pool over
	return tpl, nil
}

func sameConfig(a, b store.TemplateConfig) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// copyIntoSandbox writes a copy step's files at dst.
func (m *Manager) copyIntoSandbox(ctx context.Context, id, dst string, files []byte, single bool, actor string) error {
	f, err := m.Files(ctx, id, true, actor)
	if err != nil {
		return err
	}
	defer f.Close()
	if single {
		tr := tar.NewReader(bytes.NewReader(files))
		hdr, err := tr.Next()
		if err != nil {
			return err
		}
		if strings.HasSuffix(dst, "/") {
			dst += hdr.Name
		}
		if err := f.Mkdir(ctx, path.Dir(dst), 0o755, true, actor); err != nil {
			return err
		}
		_, err = f.WriteFile(ctx, dst, os.FileMode(hdr.Mode).Perm(), tr, actor)
		return err
	}
	if err := f.Mkdir(ctx, dst, 0o755, true, actor); err != nil {
		return err
	}
	return f.WriteTar(ctx, dst, bytes.NewReader(files), actor)
}

// buildLayer runs action in a sandbox made of layers and stores what it
// changed as a new read-only layer.
func (m *Manager) buildLayer(ctx context.Context, layers []string, cfg store.TemplateConfig, actor string, action func(*sandbox.Sandbox) error) (string, error) {
	res := sandbox.DefaultResources
	if cfg.Resources != nil {
		res = *cfg.Resources
	}
	now := m.now()
	sb := &sandbox.Sandbox{ID: newID(), State: sandbox.StateCreating, Node: m.cfg.Node, CreatedAt: now, UpdatedAt: now,
		Cause: sandbox.CauseUser, Reason: "template build",
		Spec: sandbox.Spec{Template: "(build)", Layers: slices.Clone(layers), HostUsr: cfg.HostUsr, Resources: res,
			Network: "none", Workdir: cfg.Workdir, Timeout: 2 * time.Hour,
			Labels: map[string]string{"berth.build": "1"}}}
	for _, kv := range cfg.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			if sb.Spec.Env == nil {
				sb.Spec.Env = map[string]string{}
			}
			sb.Spec.Env[k] = v
		}
	}
	if err := m.launch(ctx, sb, actor, nil); err != nil {
		return "", err
	}
	defer func() {
		if _, err := m.Delete(context.WithoutCancel(ctx), sb.ID, actor, sandbox.CauseUser, "template build finished"); err != nil {
			m.log.Warn("removing build sandbox", "sandbox", sb.ID, "err", err)
		}
	}()
	if err := action(sb); err != nil {
		return "", err
	}
	unlock := m.live.lock(sb.ID)
	defer unlock()
	return m.node.CommitLayer(ctx, sb)
}

// parseSize reads sizes such as 512Mi, 1G, 256m or plain bytes.
func parseSize(s string) (int64, error) {
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
