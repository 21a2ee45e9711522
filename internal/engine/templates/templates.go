package templates

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/files"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/identity"
	"github.com/berth-sh/berth/internal/image"
	"github.com/berth-sh/berth/internal/interp"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// Builder is the templates feature over the engine's core: imports,
// uploads and builds of template layers, declarative apply with a
// per-step cache, and the builtin template.
type Builder struct {
	e     engine.Host
	store store.Store
	node  node.Backend
	log   *slog.Logger
	files *files.Access
	// setPool sets a template's warm-pool size (apply's pool: section).
	setPool func(ctx context.Context, name string, min int) error
	// uploads holds a token per template archive being received.
	uploads chan struct{}

	tapMu sync.Mutex
	taps  map[string]*flowTap // build sandboxes' flows, by sandbox id (buildnet.go)

	images imageCache // images pulled on create (imagecache.go)
}

// MaxConcurrentUploads is how many template archives the daemon receives
// at once (each holds a connection, a file of up to 16 GiB under the data
// dir and an import); one more is refused with 429 limit_exceeded naming
// max_concurrent_uploads, to be retried.
const MaxConcurrentUploads = 4

// New returns the templates feature of e; setPool is the warm-pool
// feature's (nil: apply refuses a pool: section).
func New(e engine.Host, fa *files.Access, setPool func(ctx context.Context, name string, min int) error) *Builder {
	m := &Builder{e: e, files: fa, store: e.Store(), node: e.Backend(), log: e.Log(), setPool: setPool,
		uploads: make(chan struct{}, MaxConcurrentUploads)}
	e.Hooks().ResolveImage = m.ResolveImage // a create from an image
	e.Hooks().OnFlow(m.ObserveFlow)         // a build sandbox's flows go to its build record
	return m
}

// BuiltinTemplate is the name of the template berth provides without a
// download: a fresh minimal /etc over the host's own /usr, read-only.
const BuiltinTemplate = "base"

// maxUpload bounds a template archive uploaded through the API.
const maxUpload = 16 << 30

// EnsureBuiltin registers (or refreshes) the builtin templates: the base,
// and the code interpreter over it (ensureInterp).
func (m *Builder) EnsureBuiltin(ctx context.Context) error {
	img, err := m.e.Images().Builtin(ctx)
	if err != nil {
		return fmt.Errorf("builtin template: %w", err)
	}
	if err := m.putBuiltin(ctx, &store.Template{
		Name:    BuiltinTemplate,
		Layers:  img.Layers,
		Config:  builtinConfig(img.Config),
		Builtin: true, Source: "builtin:host", Size: img.Size, CreatedAt: m.e.Now(),
	}); err != nil {
		return err
	}
	return m.ensureInterp(ctx, img)
}

// putBuiltin stores t unless it is there already with the same layers and
// service, or a template of the user's has its name.
func (m *Builder) putBuiltin(ctx context.Context, t *store.Template) error {
	cur, err := m.store.GetTemplate(ctx, t.Name)
	if err == nil && slices.Equal(cur.Layers, t.Layers) && cur.Builtin && reflect.DeepEqual(cur.Config.Service, t.Config.Service) {
		return nil
	}
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	if err == nil && !cur.Builtin {
		m.log.Warn("a template named like the builtin exists; leaving it", "template", t.Name)
		return nil
	}
	return m.store.PutTemplate(ctx, t)
}

// ensureInterp registers the code-interpreter template (and its alias, the
// E2B SDK's default name): the base's layers plus the server's
// (internal/interp), its service the server. Without the host's Python
// packages it is not registered; doctor reports why (interp.Missing).
func (m *Builder) ensureInterp(ctx context.Context, base *image.Image) error {
	if miss := interp.Missing("/"); len(miss) > 0 {
		m.log.Warn("code-interpreter template not registered: the host lacks "+strings.Join(miss, ", "), "fix", interp.InstallHint)
		return nil
	}
	tarball, err := interp.Layer()
	if err != nil {
		return fmt.Errorf("code-interpreter template: %w", err)
	}
	id, err := m.e.Images().TarLayer(ctx, tarball)
	if err != nil {
		return fmt.Errorf("code-interpreter template: %w", err)
	}
	for _, name := range []string{interp.Template, interp.Alias} {
		cfg := builtinConfig(base.Config)
		cfg.Service = interp.Service()
		cfg.ExposedPorts = append(slices.Clone(cfg.ExposedPorts), fmt.Sprintf("%d/tcp", interp.Port))
		if err := m.putBuiltin(ctx, &store.Template{
			Name:    name,
			Layers:  append(slices.Clone(base.Layers), id),
			Config:  cfg,
			Builtin: true, Source: "builtin:code-interpreter", Size: base.Size + max(m.e.Images().Size(id), 0), CreatedAt: m.e.Now(),
		}); err != nil {
			return err
		}
	}
	return nil
}

// imageConfig is the template config an imported image's config gives.
func imageConfig(c image.Config) store.TemplateConfig {
	return store.TemplateConfig{Env: c.Env, Workdir: c.Workdir, User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd,
		ExposedPorts: c.ExposedPorts, StopSignal: c.StopSignal}
}

func builtinConfig(c image.Config) store.TemplateConfig {
	cfg := imageConfig(c)
	cfg.HostUsr = true
	return cfg
}

// ListTemplates returns a page of the templates ctx's caller sees: a
// tenant its own and the shared catalogue's it does not shadow, the host
// (and the engine's own work) the shared catalogue.
func (m *Builder) ListTemplates(ctx context.Context, p store.Page) ([]*store.Template, string, error) {
	if tenant, ok := engine.Owner(ctx).Tenant(); ok && tenant != "" {
		ts, next, err := m.store.ListTenantTemplates(ctx, tenant, p)
		// The host's image cache records are no shared catalogue: they
		// were pulled with the daemon's registry accounts.
		return slices.DeleteFunc(ts, func(t *store.Template) bool { return t.Tenant != tenant && engine.IsImageTemplate(t.Name) }), next, err
	}
	return m.store.ListTemplates(ctx, p)
}

func (m *Builder) checkNewTemplate(ctx context.Context, name string) error {
	if !sandbox.ValidName(name) {
		return errdefs.Invalid("bad template name %q: use 1-63 letters, digits, '.', '_' or '-'", name)
	}
	// Names are unique per tenant: a tenant's own may shadow a shared one.
	if _, err := m.store.GetTenantTemplate(ctx, engine.CallerTenant(ctx), name); err == nil {
		return errdefs.Conflict("template %q exists; remove it first with `berth template rm %s`", name, name)
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	return nil
}

func (m *Builder) putImage(ctx context.Context, name, source string, img *image.Image, svc *ServiceRequest) (*store.Template, error) {
	t := &store.Template{
		Tenant: engine.CallerTenant(ctx),
		Name:   name,
		Layers: img.Layers,
		Config: imageConfig(img.Config),
		Source: source, Size: img.Size, CreatedAt: m.e.Now(),
	}
	if svc != nil {
		spec, err := serviceSpec(svc, t.Config.Command())
		if err != nil {
			return nil, err
		}
		t.Config.Service = spec
	}
	if err := m.store.PutTemplate(ctx, t); err != nil {
		return nil, err
	}
	return t, nil
}

// ImportTemplate imports an OCI layout directory or a docker-save/OCI
// tarball at a path on the daemon's host, or pulls a registry reference.
// A host path is the host's alone (a tenant uploads its archive instead);
// a tenant pulls from a registry only when the daemon allows it
// (serve --tenant-pulls).
func (m *Builder) ImportTemplate(ctx context.Context, req *ImportRequest) (*store.Template, error) {
	if engine.CallerTenant(ctx) != "" {
		if req.Path != "" {
			return nil, errdefs.Permission("importing from a path on the daemon's host is the host's alone: upload it as a tarball instead (berth template import NAME FILE.tar)")
		}
		if req.Ref != "" && !m.e.Config().TenantPulls {
			return nil, errdefs.Permission("registry pulls by tenants are off on this daemon (serve --tenant-pulls): upload the image as an archive instead")
		}
	}
	if err := m.checkNewTemplate(ctx, req.Name); err != nil {
		return nil, err
	}
	return m.charged(ctx, func(ctx context.Context) (*store.Template, error) { return m.importTemplate(ctx, req) })
}

func (m *Builder) importTemplate(ctx context.Context, req *ImportRequest) (*store.Template, error) {
	var (
		img    *image.Image
		err    error
		source string
	)
	switch {
	case req.Path != "" && req.Ref != "":
		return nil, errdefs.Invalid("give either path or ref, not both")
	case req.Path != "":
		if !filepath.IsAbs(req.Path) {
			return nil, errdefs.Invalid("path must be absolute (it is read by the daemon)")
		}
		st, serr := os.Stat(req.Path)
		if serr != nil {
			return nil, errdefs.NotFound("cannot read %s: %v", req.Path, serr)
		}
		if st.IsDir() {
			source = "oci-layout:" + req.Path
			img, err = m.e.Images().ImportOCILayout(ctx, req.Path, "")
		} else {
			source = "archive:" + req.Path
			img, err = m.e.Images().ImportArchive(ctx, req.Path)
		}
	case req.Ref != "":
		source = "registry:" + req.Ref
		img, err = m.e.Images().Pull(registryCtx(ctx, req.Auth), req.Ref, req.Insecure)
	default:
		return nil, errdefs.Invalid("path or ref is required")
	}
	if err != nil {
		return nil, err
	}
	// The layers unpacked so far stay in the content-addressed cache
	// (shared, collected with it); the template is not recorded.
	if err := failpoint.Inject("import.after-unpack"); err != nil {
		return nil, err
	}
	return m.putImage(ctx, req.Name, source, img, req.Service)
}

// UploadTemplate imports a tarball streamed by the client.
func (m *Builder) UploadTemplate(ctx context.Context, name string, r io.Reader) (*store.Template, error) {
	if err := m.checkNewTemplate(ctx, name); err != nil {
		return nil, err
	}
	select {
	case m.uploads <- struct{}{}:
		defer func() { <-m.uploads }()
	default:
		return nil, errdefs.LimitBusy("max_concurrent_uploads", MaxConcurrentUploads, time.Second,
			"%d template uploads are being received", MaxConcurrentUploads)
	}
	dir := m.e.Config().UploadDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, "upload-*.tar")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	n, err := io.Copy(f, io.LimitReader(r, maxUpload+1))
	if err != nil {
		return nil, fmt.Errorf("receiving archive: %w", err)
	}
	if n > maxUpload {
		return nil, errdefs.TooLarge("template archive exceeds %d GiB", maxUpload>>30)
	}
	if n == 0 {
		return nil, errdefs.Invalid("empty archive")
	}
	return m.charged(ctx, func(ctx context.Context) (*store.Template, error) {
		img, err := m.e.Images().ImportArchive(ctx, f.Name())
		if err != nil {
			return nil, err
		}
		if err := failpoint.Inject("import.after-unpack"); err != nil {
			return nil, err
		}
		return m.putImage(ctx, name, "upload", img, nil)
	})
}

// charged runs fn, an import or build that records a template, under the
// caller's storage account (engine.ChargeImport): a tenant's layers are
// charged to its quota as they unpack, and cached layers it does not hold
// are reused only after its own bytes proved them. When a tenant's fn
// fails, the layers it unpacked that nothing records are removed again
// (its cached build steps with them): a layer no template of the tenant
// holds is on no one's bill, so it does not stay. The host's failures keep
// theirs for the build cache, as before, until a template removal's GC.
func (m *Builder) charged(ctx context.Context, fn func(context.Context) (*store.Template, error)) (*store.Template, error) {
	cctx, done, err := m.e.ChargeImport(ctx)
	if err != nil {
		return nil, err
	}
	t, err := fn(cctx)
	unpacked := done() // before the GC below: an open account keeps its layers
	if err != nil && unpacked && engine.CallerTenant(ctx) != "" {
		if gerr := m.gcLayers(context.WithoutCancel(ctx)); gerr != nil {
			m.log.Warn("removing the layers of a failed import", "err", gerr)
		}
	}
	return t, err
}

// DeleteTemplate removes the caller's template of that name (a tenant's
// own; the host's shared one for the host) that no live sandbox uses, its
// warm pool with it, and frees the layers no other template needs. A
// tenant cannot remove a shared template (403).
func (m *Builder) DeleteTemplate(ctx context.Context, name string) error {
	tenant := engine.CallerTenant(ctx)
	t, err := m.e.ResolveTemplate(ctx, tenant, name)
	if err != nil {
		return err
	}
	if t.Tenant != tenant {
		return errdefs.Permission("template %q is the host's shared template: only the host removes it", name)
	}
	if t.Builtin {
		return errdefs.Conflict("template %q is builtin and cannot be removed", name)
	}
	live, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner}, store.Page{})
	if err != nil {
		return err
	}
	// A sandbox uses this template if its tenant resolves the name to it:
	// the owner's own, or for a shared template, a tenant without one of
	// that name.
	shadowed := map[string]bool{}
	uses := func(sb *sandbox.Sandbox) (bool, error) {
		if sb.Spec.Template != name || sb.Spec.Pool != "" {
			return false, nil
		}
		if sb.Tenant == tenant {
			return true, nil
		}
		if tenant != "" {
			return false, nil
		}
		sh, ok := shadowed[sb.Tenant]
		if !ok {
			_, err := m.store.GetTenantTemplate(ctx, sb.Tenant, name)
			if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				return false, err
			}
			sh = err == nil
			shadowed[sb.Tenant] = sh
		}
		return !sh, nil
	}
	for _, sb := range live {
		u, err := uses(sb)
		if err != nil {
			return err
		}
		if u {
			return errdefs.Conflict("template %q is used by sandbox %s", name, sb.ID)
		}
	}
	// Its warm pool goes with it. The members are removed as the engine
	// (a tenant's own request cannot see them).
	if err := m.store.ClearPool(ctx, tenant, name); err != nil {
		return err
	}
	for _, sb := range live {
		if sb.Spec.Pool == name && sb.Tenant == tenant {
			if _, err := m.e.Delete(context.WithoutCancel(engineCtx(ctx)), sb.ID, "template-rm", sandbox.CauseUser, "template removed"); err != nil {
				return err
			}
		}
	}
	if err := m.store.DeleteTenantTemplate(ctx, tenant, name); err != nil {
		return err
	}
	return m.gcLayers(ctx)
}

// engineCtx is ctx acting as the host: for the engine's own steps of a
// tenant's request (removing its pool members, which it cannot see).
func engineCtx(ctx context.Context) context.Context {
	c, _ := identity.From(ctx)
	c.Host = true
	return identity.With(ctx, c)
}

func (m *Builder) gcLayers(ctx context.Context) error {
	// Layers are content-addressed and shared: a layer any tenant's
	// template references stays, whoever deleted theirs.
	inUse, err := m.store.TemplateLayers(ctx)
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, l := range inUse {
		keep[l] = true
	}
	// Sandboxes and snapshots keep the layers they were made from, even
	// after their template changed or went.
	live, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner}, store.Page{})
	if err != nil {
		return err
	}
	for _, sb := range live {
		for _, l := range sb.Spec.Layers {
			keep[l] = true
		}
	}
	snaps, _, err := m.store.ListSnapshots(ctx, store.SnapshotFilter{Owner: store.AnyOwner}, store.Page{})
	if err != nil {
		return err
	}
	for _, sn := range snaps {
		for _, l := range sn.Layers {
			keep[l] = true
		}
	}
	removed, err := m.e.Images().GC(ctx, keep)
	if len(removed) > 0 {
		m.log.Info("removed unused layers", "count", len(removed))
	}
	return err
}

// BuildTemplate runs setup steps once in a sandbox made from req.From and
// stores the result as a new read-only layer on top of it, so tasks
// started from the new template do not repeat the setup.
func (m *Builder) BuildTemplate(ctx context.Context, req *BuildRequest, actor string, progress func(Event)) (*store.Template, error) {
	return m.charged(ctx, func(ctx context.Context) (*store.Template, error) { return m.buildTemplate(ctx, req, actor, progress) })
}

func (m *Builder) buildTemplate(ctx context.Context, req *BuildRequest, actor string, progress func(Event)) (*store.Template, error) {
	if err := m.checkNewTemplate(ctx, req.Name); err != nil {
		return nil, err
	}
	if len(req.Run) == 0 {
		return nil, errdefs.Invalid("at least one --run step is required")
	}
	tenant := engine.CallerTenant(ctx)
	base, err := m.e.ResolveTemplate(ctx, tenant, req.From)
	if err != nil {
		return nil, err
	}
	for k := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, errdefs.Invalid("bad env name %q", k)
		}
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = time.Hour
	}
	cfg := base.Config
	cfg.Env = slices.Clone(cfg.Env)
	for _, k := range slices.Sorted(maps.Keys(req.Env)) {
		cfg.Env = setEnv(cfg.Env, k, req.Env[k])
	}
	// The service is checked before anything is built: a bad one leaves
	// nothing behind.
	if req.Service != nil {
		spec, err := serviceSpec(req.Service, cfg.Command())
		if err != nil {
			return nil, err
		}
		cfg.Service = spec
	}
	bn := BuildNetwork{Mode: req.Network, Allow: req.Allow}
	if err := m.checkNetwork(bn); err != nil {
		return nil, err
	}
	cfg.Build = nil // the base's record is the base's
	rec := &store.BuildStep{Step: 1, Desc: "run " + strings.Join(req.Run, " && ")}
	layer, err := m.buildLayer(ctx, base.Layers, cfg, actor, bn, rec, func(sb *sandbox.Sandbox) error {
		for i, step := range req.Run {
			progress(Event{Step: i + 1, Stream: "stdout", Data: []byte(fmt.Sprintf("--> step %d/%d: %s\n", i+1, len(req.Run), step))})
			if err := m.runStep(ctx, sb.ID, i+1, step, "", timeout, actor, progress); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	cfg.Build = &store.BuildRecord{Steps: []store.BuildStep{*rec}}
	size := base.Size + m.e.Images().Size(layer)
	t := &store.Template{
		Tenant: tenant, Name: req.Name, Layers: append(slices.Clone(base.Layers), layer), Config: cfg,
		Source: "build:" + base.Name, Size: size, CreatedAt: m.e.Now(),
	}
	if err := failpoint.Inject("build.before-record"); err != nil {
		return nil, err
	}
	if err := m.store.PutTemplate(ctx, t); err != nil {
		return nil, err
	}
	return t, nil
}

// runStep runs one shell step of a template build in sandbox id,
// streaming its output as build events; a non-zero exit fails the build.
func (m *Builder) runStep(ctx context.Context, id string, n int, step, workdir string, timeout time.Duration, actor string, progress func(Event)) error {
	out := &buildWriter{step: n, stream: "stdout", emit: progress}
	errw := &buildWriter{step: n, stream: "stderr", emit: progress}
	exit, err := m.e.Exec(ctx, id, &engine.ExecRequest{Cmd: []string{"/bin/sh", "-c", step}, Workdir: workdir, Timeout: timeout},
		engine.ExecIO{Stdout: out, Stderr: errw}, actor)
	if err != nil {
		return fmt.Errorf("step %d: %w", n, err)
	}
	if exit.Code != 0 {
		return errdefs.Invalid("step %d (%s) failed with exit code %d", n, step, exit.Code)
	}
	return nil
}

func setEnv(env []string, k, v string) []string {
	for i, kv := range env {
		if strings.HasPrefix(kv, k+"=") {
			env[i] = k + "=" + v
			return env
		}
	}
	return append(env, k+"="+v)
}

type buildWriter struct {
	step   int
	stream string
	emit   func(Event)
}

func (w *buildWriter) Write(p []byte) (int, error) {
	w.emit(Event{Step: w.step, Stream: w.stream, Data: slices.Clone(p)})
	return len(p), nil
}

// serviceSpec is the store's form of a requested service; imageCmd is the
// image's entrypoint and cmd, for FromImage.
func serviceSpec(r *ServiceRequest, imageCmd []string) (*store.ServiceSpec, error) {
	if (len(r.Cmd) == 0) == !r.FromImage {
		return nil, errdefs.Invalid("service: give exactly one of cmd and from_image")
	}
	spec := &store.ServiceSpec{Cmd: slices.Clone(r.Cmd), Restart: r.Restart, MaxRestarts: r.MaxRestarts, ReadyPort: r.ReadyPort}
	if r.FromImage {
		if len(imageCmd) == 0 {
			return nil, errdefs.Invalid("service from the image: the image names no entrypoint or cmd")
		}
		spec.Cmd = slices.Clone(imageCmd)
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	return spec, nil
}
