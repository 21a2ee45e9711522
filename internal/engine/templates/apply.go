package templates

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/network/egressrule"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/templatefile"
)

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
func (m *Builder) Apply(ctx context.Context, req *ApplyRequest, actor string, progress func(Event)) (*store.Template, error) {
	return m.charged(ctx, func(ctx context.Context) (*store.Template, error) { return m.apply(ctx, req, actor, progress) })
}

func (m *Builder) apply(ctx context.Context, req *ApplyRequest, actor string, progress func(Event)) (*store.Template, error) {
	tf, err := templatefile.Parse([]byte(req.Spec))
	if errors.Is(err, templatefile.ErrTooLarge) {
		return nil, errdefs.TooLarge("template file exceeds %d bytes", templatefile.MaxSize)
	}
	if err != nil {
		return nil, errdefs.Invalid("template file: %v", err)
	}
	// The caller's tenant owns the template, its build sandbox and its
	// build-cache entries (never another tenant's: a hit across tenants
	// would hand over a layer made from the other's files).
	tenant := engine.CallerTenant(ctx)
	say := func(step int, format string, args ...any) {
		progress(Event{Step: step, Stream: "stdout", Data: []byte(fmt.Sprintf(format, args...) + "\n")})
	}
	var layers []string
	var cfg store.TemplateConfig
	if tf.From != "" {
		base, err := m.e.ResolveTemplate(ctx, tenant, tf.From)
		if err != nil {
			return nil, err
		}
		layers, cfg = slices.Clone(base.Layers), base.Config
		cfg.Env = slices.Clone(cfg.Env)
		if tf.From == tf.Name {
			return nil, errdefs.Invalid("a template cannot be built from itself")
		}
	} else {
		if tenant != "" && !m.e.Config().TenantPulls {
			return nil, errdefs.Permission("registry pulls by tenants are off on this daemon (serve --tenant-pulls): build from a template you can see")
		}
		say(0, "--> pulling %s", tf.Image)
		img, err := m.e.Images().Pull(registryCtx(ctx, nil), tf.Image, tf.Insecure)
		if err != nil {
			return nil, err
		}
		layers = img.Layers
		cfg = imageConfig(img.Config)
	}
	// Every step's network is checked before anything is built.
	for i, st := range tf.Steps {
		if err := m.checkNetwork(BuildNetwork{Mode: st.Network, Allow: st.Allow}); err != nil {
			return nil, fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	cfg.Build = nil // the base's record is the base's
	record := &store.BuildRecord{}
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
		if u := st.User; u != nil {
			desc = fmt.Sprintf("user %s (uid %d)", u.Name, u.UID)
			key = hashOf(key, string(stepJSON))
			if u.Default {
				cfg.User = u.Name
			}
		} else if st.Copy != nil {
			var sum string
			if files, sum, single, err = copyFiles(req.Files, st.Copy.Src); err != nil {
				return nil, fmt.Errorf("step %d: %w", n, err)
			}
			key = hashOf(key, string(stepJSON), sum)
			desc = fmt.Sprintf("copy %s %s", st.Copy.Src, st.Copy.Dst)
		} else {
			key = hashOf(key, string(stepJSON), strings.Join(cfg.Env, "\x00"), cfg.Workdir)
		}
		rec := store.BuildStep{Step: n, Desc: desc}
		if layer, err := m.store.GetBuildCache(ctx, tenant, key); err == nil && m.e.Images().HasLayer(layer) {
			say(n, "--> step %d/%d: %s (cached)", n, len(tf.Steps), desc)
			layers = append(layers, layer)
			rec.Cached = true
			record.Steps = append(record.Steps, rec)
			continue
		}
		say(n, "--> step %d/%d: %s", n, len(tf.Steps), desc)
		bn := BuildNetwork{Mode: st.Network, Allow: st.Allow}
		if bn.egress() {
			say(n, "    network egress, allow: %s", strings.Join(bn.Allow, ", "))
		}
		layer, err := m.buildLayer(ctx, layers, cfg, actor, bn, &rec, func(sb *sandbox.Sandbox) error {
			if st.User != nil {
				return m.addUser(ctx, sb.ID, st.User, actor)
			}
			if st.Copy != nil {
				return m.copyIntoSandbox(ctx, sb.ID, st.Copy.Dst, files, single, actor)
			}
			return m.runStep(ctx, sb.ID, n, st.Run, cfg.Workdir, time.Hour, actor, progress)
		})
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", n, err)
		}
		if err := m.store.PutBuildCache(ctx, tenant, key, layer); err != nil {
			return nil, err
		}
		layers = append(layers, layer)
		record.Steps = append(record.Steps, rec)
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
			b, err := templatefile.ParseSize(r.Memory)
			if err != nil {
				return nil, errdefs.Invalid("resources.memory: %v", err)
			}
			res.MemoryBytes = b
		}
		if r.Disk != "" {
			b, err := templatefile.ParseSize(r.Disk)
			if err != nil {
				return nil, errdefs.Invalid("resources.disk: %v", err)
			}
			res.DiskBytes = b
		}
		if err := (&sandbox.Spec{Resources: res}).Validate(); err != nil {
			return nil, err
		}
		if err := m.e.CheckDisk(&sandbox.Spec{Resources: res}); err != nil {
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
		if err := egressrule.Check(n.Allow); err != nil {
			return nil, errdefs.Invalid("network.allow: %s", errdefs.Message(err))
		}
		cfg.Network, cfg.Allow = n.Mode, n.Allow
	}
	if sv := tf.Service; sv != nil {
		spec := &store.ServiceSpec{Cmd: slices.Clone(sv.Cmd), Restart: sv.Restart, MaxRestarts: sv.MaxRestarts,
			Env: sv.Env, Dir: sv.Dir, User: sv.User}
		if sv.FromImage {
			if len(cfg.Command()) == 0 {
				return nil, errdefs.Invalid("service.from_image: the image names no entrypoint or cmd")
			}
			spec.Cmd = cfg.Command()
		}
		if err := spec.Validate(); err != nil {
			return nil, err
		}
		cfg.Service = spec
	}
	cur, err := m.store.GetTenantTemplate(ctx, tenant, tf.Name)
	if built > 0 || err != nil || cur.Config.Build == nil {
		cfg.Build = record
	} else {
		cfg.Build = cur.Config.Build // nothing ran: the record of the build that made the layers stays
	}
	tpl := &store.Template{Tenant: tenant, Name: tf.Name, Layers: layers, Config: cfg, Source: "apply", CreatedAt: m.e.Now()}
	for _, l := range layers {
		tpl.Size += max(m.e.Images().Size(l), 0)
	}
	switch {
	case err == nil && cur.Builtin:
		return nil, errdefs.Conflict("template %q is builtin", tf.Name)
	case err == nil && slices.Equal(cur.Layers, tpl.Layers) && sameConfig(cur.Config, cfg):
		say(0, "--> %s is up to date", tf.Name)
		tpl = cur
	default:
		// Every step's layer built and cached: a failure here leaves the
		// cache to the next build, and no template.
		if err := failpoint.Inject("build.before-record"); err != nil {
			return nil, err
		}
		if err := m.store.PutTemplate(ctx, tpl); err != nil {
			return nil, err
		}
		say(0, "--> %s: %d layers (%d built, %d cached)", tf.Name, len(layers), built, len(tf.Steps)-built)
	}
	if tf.Pool != nil {
		if m.setPool == nil {
			return nil, errdefs.NotSupported("this daemon keeps no warm pools")
		}
		if err := m.setPool(ctx, tf.Name, tf.Pool.Min); err != nil {
			return nil, err
		}
	}
	m.e.WakeReconciler() // a changed template rolls its pool over
	return tpl, nil
}

// sameConfig compares two templates' defaults (not their build records).
func sameConfig(a, b store.TemplateConfig) bool {
	a.Build, b.Build = nil, nil
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// copyIntoSandbox writes a copy step's files at dst.
func (m *Builder) copyIntoSandbox(ctx context.Context, id, dst string, files []byte, single bool, actor string) error {
	f, err := m.files.Files(ctx, id, true, actor)
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

// buildLayer runs action in a sandbox made of layers, with network bn,
// and stores what it changed as a new read-only layer. rec, if set, gets
// the build sandbox's id, network and flows.
func (m *Builder) buildLayer(ctx context.Context, layers []string, cfg store.TemplateConfig, actor string, bn BuildNetwork, rec *store.BuildStep, action func(*sandbox.Sandbox) error) (string, error) {
	res := sandbox.DefaultResources
	if cfg.Resources != nil {
		res = *cfg.Resources
	}
	now := m.e.Now()
	mode := "none"
	if bn.egress() {
		mode = "egress"
	}
	// The build sandbox is the caller's tenant's (its quota counts it).
	sb := &sandbox.Sandbox{ID: engine.NewID(), Tenant: engine.CallerTenant(ctx), State: sandbox.StateCreating, Node: m.e.Node(), CreatedAt: now, UpdatedAt: now,
		Cause: sandbox.CauseUser, Reason: "template build",
		Spec: sandbox.Spec{Template: "(build)", Layers: slices.Clone(layers), HostUsr: cfg.HostUsr, Resources: res,
			Network: mode, Allow: slices.Clone(bn.Allow), Workdir: cfg.Workdir, Timeout: 2 * time.Hour,
			Labels: map[string]string{"berth.build": "1"}}}
	for _, kv := range cfg.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			if sb.Spec.Env == nil {
				sb.Spec.Env = map[string]string{}
			}
			sb.Spec.Env[k] = v
		}
	}
	var tap *flowTap
	if bn.egress() {
		if err := m.e.PrepareNetwork(ctx, &sb.Spec, sb.ID, nil); err != nil {
			return "", err
		}
		var untap func()
		tap, untap = m.tap(sb.ID)
		defer untap()
	}
	if rec != nil {
		rec.Sandbox, rec.Network, rec.Allow = sb.ID, mode, slices.Clone(bn.Allow)
		defer func() {
			if tap != nil {
				rec.Flows, rec.FlowsDropped = tap.snapshot()
			}
		}()
	}
	if err := m.e.Launch(ctx, sb, actor, nil); err != nil {
		return "", err
	}
	defer func() {
		if _, err := m.e.Delete(context.WithoutCancel(ctx), sb.ID, actor, sandbox.CauseUser, "template build finished"); err != nil {
			m.log.Warn("removing build sandbox", "sandbox", sb.ID, "err", err)
		}
	}()
	// A crash from here leaves the build sandbox (label berth.build) to
	// the reconciler, which removes it: no build outlives its daemon. An
	// error here fails the build, its sandbox removed by the defer above.
	if err := failpoint.Inject("build.after-launch"); err != nil {
		return "", err
	}
	if err := action(sb); err != nil {
		if tap != nil {
			err = tap.explainDenials(ctx, err)
		}
		return "", err
	}
	rl, err := node.Need[node.RootLayer](m.node, node.OpTemplateBuilds)
	if err != nil {
		return "", err
	}
	_, unlock := m.e.Lock(sb.ID)
	defer unlock()
	layer, err := rl.CommitLayer(ctx, sb)
	if err != nil {
		return "", err
	}
	// The layer is in the store, no cache entry or template names it
	// yet: a failure from here leaves it to the store's unreferenced
	// layers, as an import's that failed.
	if err := failpoint.Inject("build.after-commit"); err != nil {
		return "", err
	}
	return layer, nil
}
