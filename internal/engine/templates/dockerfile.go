package templates

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/image/dockerfile"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// DockerfileRequest builds a template from a Dockerfile: Context is the
// build context, a tar archive holding the Dockerfile at Dockerfile
// ("Dockerfile" if empty).
type DockerfileRequest struct {
	Name       string
	Dockerfile string
	Context    io.Reader
	BuildArgs  map[string]string
	Target     string
	// Network is the RUN steps' network (none unless egress).
	Network BuildNetwork
	Timeout time.Duration // per RUN; 0 = an hour
	// Service, if set, is the result's supervised service (the E2B
	// door's start command); nil keeps the base's. Cmd only.
	Service *ServiceRequest
}

// stageResult is what a stage built: its layers and config, and the cache
// key of its last step.
type stageResult struct {
	layers []string
	cfg    store.TemplateConfig
	key    string
}

// BuildDockerfile builds a template from a Dockerfile: each RUN, COPY and
// ADD a layer cached by the hash of everything it depends on (the base's
// layers, the steps before it, its command, environment, user, workdir
// and network, and the content it copies), the config instructions the
// template's defaults. Only the stages the result needs are built.
func (m *Builder) BuildDockerfile(ctx context.Context, req *DockerfileRequest, actor string, progress func(Event)) (*store.Template, error) {
	return m.charged(ctx, func(ctx context.Context) (*store.Template, error) {
		return m.buildDockerfile(ctx, req, actor, progress)
	})
}

func (m *Builder) buildDockerfile(ctx context.Context, req *DockerfileRequest, actor string, progress func(Event)) (*store.Template, error) {
	if err := m.checkNewTemplate(ctx, req.Name); err != nil {
		return nil, err
	}
	if err := m.checkNetwork(req.Network); err != nil {
		return nil, err
	}
	var svc *store.ServiceSpec
	if req.Service != nil { // checked before anything is built
		var err error
		if svc, err = serviceSpec(req.Service, nil); err != nil {
			return nil, err
		}
	}
	df := req.Dockerfile
	if df == "" {
		df = "Dockerfile"
	}
	bc, src, err := readContext(req.Context, m.e.Config().UploadDir, df)
	if err != nil {
		return nil, err
	}
	defer bc.Close()
	tenant := engine.CallerTenant(ctx)
	plan, err := dockerfile.Convert(src, dockerfile.Options{BuildArgs: req.BuildArgs, Target: req.Target,
		BaseEnv: func(base string) []string {
			if t, err := m.e.ResolveTemplate(ctx, tenant, base); err == nil {
				return t.Config.Env
			}
			return nil
		},
		BaseWorkdir: func(base string) string {
			if t, err := m.e.ResolveTemplate(ctx, tenant, base); err == nil {
				return t.Config.Workdir
			}
			return ""
		}})
	if err != nil {
		return nil, errdefs.Invalid("%s: %v", df, err)
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = time.Hour
	}
	say := func(step int, format string, args ...any) {
		progress(Event{Step: step, Stream: "stdout", Data: []byte(fmt.Sprintf(format, args...) + "\n")})
	}
	need := plan.Needed()
	total := 0
	for i, s := range plan.Stages {
		if need[i] {
			total += len(s.Steps)
		}
	}
	results := make([]*stageResult, len(plan.Stages))
	record := &store.BuildRecord{}
	n, built := 0, 0
	for si, s := range plan.Stages {
		if !need[si] {
			continue
		}
		res, err := m.stageBase(ctx, s, results, say)
		if err != nil {
			return nil, annotate(err, fmt.Sprintf("%s: line %d (FROM): ", df, s.Line), "")
		}
		cmdSet := false
		var pendingDirs []string
		for _, st := range s.Steps {
			n++
			stepJSON, _ := json.Marshal(st)
			fail := func(err error) error {
				return annotate(err, fmt.Sprintf("%s: line %d (%s): ", df, st.Line, st.Text), "")
			}
			switch st.Kind {
			case dockerfile.KindEnv:
				for _, kv := range st.Env {
					res.cfg.Env = setEnv(res.cfg.Env, kv[0], kv[1])
				}
			case dockerfile.KindLabel:
				if res.cfg.Labels == nil {
					res.cfg.Labels = map[string]string{}
				}
				for _, kv := range st.Env {
					res.cfg.Labels[kv[0]] = kv[1]
				}
			case dockerfile.KindWorkdir:
				res.cfg.Workdir = st.Workdir
				pendingDirs = append(pendingDirs, st.Workdir) // made with the next layer, as docker makes it
			case dockerfile.KindUser:
				res.cfg.User = st.User
			case dockerfile.KindExpose:
				for _, p := range st.Ports {
					if !slices.Contains(res.cfg.ExposedPorts, p) {
						res.cfg.ExposedPorts = append(res.cfg.ExposedPorts, p)
					}
				}
			case dockerfile.KindCmd:
				res.cfg.Cmd, cmdSet = st.Cmd, true
			case dockerfile.KindEntrypoint:
				res.cfg.Entrypoint = st.Cmd
				if !cmdSet { // docker: an ENTRYPOINT drops the CMD the stage did not set itself
					res.cfg.Cmd = nil
				}
			case dockerfile.KindStopSignal:
				res.cfg.StopSignal = st.Signal
			}
			if st.Kind != dockerfile.KindRun && st.Kind != dockerfile.KindCopy {
				res.key = hashOf(res.key, string(stepJSON))
				say(n, "--> [%d/%d] %s", n, total, st.Text)
				continue
			}
			var (
				items []copyItem
				from  *stageResult
				bn    BuildNetwork
			)
			switch {
			case st.Kind == dockerfile.KindRun:
				bn = req.Network
				res.key = hashOf(res.key, string(stepJSON), strings.Join(res.cfg.Env, "\x00"), res.cfg.Workdir, res.cfg.User,
					bn.Mode, strings.Join(bn.Allow, "\x00"), strings.Join(pendingDirs, "\x00"))
			case st.Copy.FromStage >= 0:
				from = results[st.Copy.FromStage]
				res.key = hashOf(append([]string{res.key, string(stepJSON), strings.Join(pendingDirs, "\x00")}, from.layers...)...)
			default:
				var sum string
				if items, sum, err = bc.plan(st.Copy); err != nil {
					return nil, fail(err)
				}
				res.key = hashOf(res.key, string(stepJSON), sum, strings.Join(pendingDirs, "\x00"))
			}
			rec := store.BuildStep{Step: n, Desc: st.Text, Line: st.Line}
			if layer, err := m.store.GetBuildCache(ctx, tenant, res.key); err == nil && m.e.Images().HasLayer(layer) {
				say(n, "--> [%d/%d] %s (cached)", n, total, st.Text)
				res.layers = append(res.layers, layer)
				rec.Cached = true
				record.Steps = append(record.Steps, rec)
				pendingDirs = nil
				continue
			}
			say(n, "--> [%d/%d] %s", n, total, st.Text)
			dirs := pendingDirs
			cfg := res.cfg
			layer, err := m.buildLayer(ctx, res.layers, cfg, actor, bn, &rec, func(sb *sandbox.Sandbox) error {
				if err := m.makeDirs(ctx, sb.ID, dirs, actor); err != nil {
					return err
				}
				switch {
				case st.Kind == dockerfile.KindRun:
					return m.runDockerStep(ctx, sb.ID, n, st, cfg, timeout, actor, progress)
				case from != nil:
					return m.copyFromStage(ctx, sb.ID, from, st.Copy, actor)
				default:
					return m.copyFromContext(ctx, sb.ID, bc, items, st.Copy, actor)
				}
			})
			if err != nil {
				return nil, fail(err)
			}
			if err := m.store.PutBuildCache(ctx, tenant, res.key, layer); err != nil {
				return nil, err
			}
			res.layers = append(res.layers, layer)
			record.Steps = append(record.Steps, rec)
			pendingDirs = nil
			built++
		}
		if len(pendingDirs) > 0 && si == plan.Target {
			// The result's workdir exists, though no step came after it.
			res.key = hashOf(res.key, "workdirs", strings.Join(pendingDirs, "\x00"))
			layer, err := m.cachedLayer(ctx, tenant, res.key, res.layers, res.cfg, actor, func(sb *sandbox.Sandbox) error {
				return m.makeDirs(ctx, sb.ID, pendingDirs, actor)
			})
			if err != nil {
				return nil, fmt.Errorf("%s: WORKDIR %s: %w", df, res.cfg.Workdir, err)
			}
			res.layers = append(res.layers, layer)
		}
		results[si] = res
	}
	res := results[plan.Target]
	cfg := res.cfg
	cfg.Build = record
	if svc != nil {
		cfg.Service = svc
	}
	t := &store.Template{Tenant: tenant, Name: req.Name, Layers: res.layers, Config: cfg, Source: "dockerfile", CreatedAt: m.e.Now()}
	for _, l := range t.Layers {
		t.Size += max(m.e.Images().Size(l), 0)
	}
	if err := failpoint.Inject("build.before-record"); err != nil {
		return nil, err
	}
	if err := m.store.PutTemplate(ctx, t); err != nil {
		return nil, err
	}
	say(0, "--> %s: %d layers (%d built, %d cached)", req.Name, len(t.Layers), built, len(record.Steps)-built)
	return t, nil
}

// stageBase is a stage's starting point: an earlier stage's result, a
// template the caller sees, or an image pulled from a registry (when the
// caller may pull).
func (m *Builder) stageBase(ctx context.Context, s *dockerfile.Stage, results []*stageResult, say func(int, string, ...any)) (*stageResult, error) {
	clone := func(layers []string, cfg store.TemplateConfig) *stageResult {
		cfg.Env = slices.Clone(cfg.Env)
		cfg.ExposedPorts = slices.Clone(cfg.ExposedPorts)
		if cfg.Labels != nil {
			l := make(map[string]string, len(cfg.Labels))
			for k, v := range cfg.Labels {
				l[k] = v
			}
			cfg.Labels = l
		}
		cfg.Build = nil
		return &stageResult{layers: slices.Clone(layers), cfg: cfg,
			key: hashOf(append([]string{"base", fmt.Sprint(cfg.HostUsr)}, layers...)...)}
	}
	switch {
	case s.BaseStage >= 0:
		r := results[s.BaseStage]
		out := clone(r.layers, r.cfg)
		out.key = r.key
		return out, nil
	case s.Scratch:
		return nil, errdefs.Invalid("FROM scratch is not supported: a build step needs a shell; start from a template (berth template ls)")
	}
	tenant := engine.CallerTenant(ctx)
	t, err := m.e.ResolveTemplate(ctx, tenant, s.Base)
	if err == nil {
		return clone(t.Layers, t.Config), nil
	}
	if !errors.Is(err, errdefs.ErrNotFound) {
		return nil, err
	}
	if tenant != "" && !m.e.Config().TenantPulls {
		return nil, errdefs.NotFound("no template %q, and registry pulls by tenants are off on this daemon (serve --tenant-pulls)", s.Base)
	}
	say(0, "--> pulling %s", s.Base)
	img, perr := m.e.Images().Pull(registryCtx(ctx, nil), s.Base, false)
	if perr != nil {
		return nil, fmt.Errorf("no template %q, and pulling it as an image failed: %w", s.Base, perr)
	}
	return clone(img.Layers, imageConfig(img.Config)), nil
}

// cachedLayer is a layer made by action, or the cached one of key.
func (m *Builder) cachedLayer(ctx context.Context, tenant, key string, layers []string, cfg store.TemplateConfig, actor string, action func(*sandbox.Sandbox) error) (string, error) {
	if layer, err := m.store.GetBuildCache(ctx, tenant, key); err == nil && m.e.Images().HasLayer(layer) {
		return layer, nil
	}
	layer, err := m.buildLayer(ctx, layers, cfg, actor, BuildNetwork{}, nil, action)
	if err != nil {
		return "", err
	}
	return layer, m.store.PutBuildCache(ctx, tenant, key, layer)
}

func (m *Builder) makeDirs(ctx context.Context, id string, dirs []string, actor string) error {
	if len(dirs) == 0 {
		return nil
	}
	f, err := m.files.Files(ctx, id, true, actor)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, d := range dirs {
		if err := f.Mkdir(ctx, d, 0o755, true, actor); err != nil {
			return fmt.Errorf("WORKDIR %s: %w", d, err)
		}
	}
	return nil
}

// runDockerStep runs a RUN as the stage's user in its workdir, the build
// arguments in its environment.
func (m *Builder) runDockerStep(ctx context.Context, id string, n int, st *dockerfile.Step, cfg store.TemplateConfig, timeout time.Duration, actor string, progress func(Event)) error {
	out := &buildWriter{step: n, stream: "stdout", emit: progress}
	errw := &buildWriter{step: n, stream: "stderr", emit: progress}
	env := map[string]string{}
	for _, kv := range st.RunEnv {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	exit, err := m.e.Exec(ctx, id, &engine.ExecRequest{Cmd: st.Run, Env: env, User: cfg.User, Workdir: cfg.Workdir, Timeout: timeout},
		engine.ExecIO{Stdout: out, Stderr: errw}, actor)
	if err != nil {
		return err
	}
	switch {
	case exit.TimedOut:
		return errdefs.Invalid("timed out after %s and was killed", timeout)
	case exit.OOMKilled:
		return errdefs.Invalid("killed: out of memory")
	case exit.Code != 0:
		return errdefs.Invalid("exit code %d", exit.Code)
	}
	return nil
}

// copyFromContext writes a COPY's context entries into the sandbox, then
// applies --chown and --chmod.
func (m *Builder) copyFromContext(ctx context.Context, id string, bc *buildContext, items []copyItem, cp *dockerfile.Copy, actor string) error {
	f, err := m.files.Files(ctx, id, true, actor)
	if err != nil {
		return err
	}
	defer f.Close()
	var targets []string
	for _, it := range items {
		if cp.Add && it.asName != "" && bc.isArchive(it.src) {
			return errdefs.Invalid("ADD of an archive (%s) is not supported (berth does not unpack it): COPY it and RUN tar -x", it.src)
		}
		if err := f.Mkdir(ctx, it.dir, 0o755, true, actor); err != nil {
			return err
		}
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(bc.writeTar(pw, it)) }()
		err := f.WriteTar(ctx, it.dir, pr, actor)
		pr.CloseWithError(err)
		if err != nil {
			return fmt.Errorf("copying %s: %w", it.src, err)
		}
		if it.asName != "" {
			targets = append(targets, path.Join(it.dir, it.asName))
		} else {
			for _, e := range bc.under(it.src) {
				rel := strings.TrimPrefix(strings.TrimPrefix(e.hdr.Name, it.src), "/")
				if it.src == "." {
					rel = e.hdr.Name
				}
				if rel != "" && !strings.Contains(rel, "/") {
					targets = append(targets, path.Join(it.dir, rel))
				}
			}
		}
	}
	return m.ownAndMode(ctx, id, targets, cp, actor)
}

// isArchive reports whether a context file starts as a tar or a
// compressed stream does (docker's ADD would unpack it).
func (c *buildContext) isArchive(name string) bool {
	e := c.entries[name]
	if e == nil || e.size < 6 {
		return false
	}
	head := make([]byte, 512)
	k, _ := c.f.ReadAt(head[:min(int64(len(head)), e.size)], e.off)
	head = head[:k]
	for _, magic := range [][]byte{{0x1f, 0x8b}, []byte("BZh"), {0xfd, '7', 'z', 'X', 'Z', 0}, {0x28, 0xb5, 0x2f, 0xfd}} {
		if bytes.HasPrefix(head, magic) {
			return true
		}
	}
	return len(head) >= 262 && string(head[257:262]) == "ustar"
}

// copyFromStage copies a COPY --from's sources out of an earlier stage
// (read by a sandbox of its layers, never from the host's view of them).
func (m *Builder) copyFromStage(ctx context.Context, id string, from *stageResult, cp *dockerfile.Copy, actor string) error {
	spool, err := os.CreateTemp(m.e.Config().UploadDir, "stage-*")
	if err != nil {
		return err
	}
	defer os.Remove(spool.Name())
	defer spool.Close()
	type part struct {
		src      string
		off, end int64
	}
	var parts []part
	_, err = m.buildLayer(ctx, from.layers, from.cfg, actor, BuildNetwork{}, nil, func(sb *sandbox.Sandbox) error {
		f, err := m.files.Files(ctx, sb.ID, false, actor)
		if err != nil {
			return err
		}
		defer f.Close()
		for _, src := range cp.Srcs {
			if strings.ContainsAny(src, `*?[\`) {
				return errdefs.Invalid("COPY --from with a wildcard (%s) is not supported", src)
			}
			off, _ := spool.Seek(0, io.SeekCurrent)
			if err := f.ReadTar(ctx, "/"+src, spool); err != nil {
				return fmt.Errorf("%s in the stage: %w", src, err)
			}
			end, _ := spool.Seek(0, io.SeekCurrent)
			parts = append(parts, part{src, off, end})
		}
		return errSkipCommit
	})
	if err != nil && !errors.Is(err, errSkipCommit) {
		return err
	}
	f, err := m.files.Files(ctx, id, true, actor)
	if err != nil {
		return err
	}
	defer f.Close()
	var targets []string
	for _, p := range parts {
		r := io.NewSectionReader(spool, p.off, p.end-p.off)
		dir, name, isDir, err := restage(r, p.src, cp)
		if err != nil {
			return err
		}
		if err := f.Mkdir(ctx, dir, 0o755, true, actor); err != nil {
			return err
		}
		pr, pw := io.Pipe()
		go func() {
			pw.CloseWithError(retarStage(io.NewSectionReader(spool, p.off, p.end-p.off), pw, path.Base(p.src), name, isDir))
		}()
		err = f.WriteTar(ctx, dir, pr, actor)
		pr.CloseWithError(err)
		if err != nil {
			return fmt.Errorf("copying %s: %w", p.src, err)
		}
		if name != "" {
			targets = append(targets, path.Join(dir, name))
		} else {
			targets = append(targets, dir)
		}
	}
	return m.ownAndMode(ctx, id, targets, cp, actor)
}

// ownAndMode applies a COPY's --chown and --chmod to what it wrote, in
// the sandbox (names resolve in its /etc/passwd and /etc/group).
func (m *Builder) ownAndMode(ctx context.Context, id string, targets []string, cp *dockerfile.Copy, actor string) error {
	if len(targets) == 0 || cp.Chown == "" && cp.Chmod == "" {
		return nil
	}
	var script []string
	if cp.Chown != "" {
		script = append(script, `chown -hR -- "$0" "$@"`)
	}
	if cp.Chmod != "" {
		script = append(script, `chmod -R -- "$BERTH_CHMOD" "$@"`)
	}
	owner := cp.Chown
	if owner == "" {
		owner = "0"
	}
	var out bytes.Buffer
	w := &limitedBuffer{b: &out, n: 4096}
	exit, err := m.e.Exec(ctx, id, &engine.ExecRequest{Cmd: append([]string{"/bin/sh", "-c", strings.Join(script, " && "), owner}, targets...),
		Env: map[string]string{"BERTH_CHMOD": cp.Chmod}, Timeout: 10 * time.Minute}, engine.ExecIO{Stdout: w, Stderr: w}, actor)
	if err != nil {
		return err
	}
	if exit.Code != 0 {
		return errdefs.Invalid("--chown/--chmod failed: %s", strings.TrimSpace(out.String()))
	}
	return nil
}

type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// errSkipCommit ends a buildLayer whose sandbox was only read.
var errSkipCommit = errors.New("read only: no layer")

// restage reads the head of a stage's archive of src (its top entry named
// as src's base) and returns where a COPY writes it: into dir, as name
// (a file), or its contents into dir (a directory: name "").
func restage(r io.Reader, src string, cp *dockerfile.Copy) (dir, name string, isDir bool, err error) {
	hdr, err := tar.NewReader(r).Next()
	if err != nil {
		return "", "", false, fmt.Errorf("%s in the stage: %w", src, err)
	}
	switch {
	case hdr.Typeflag == tar.TypeDir:
		return cp.Dst, "", true, nil
	case cp.DstIsDir:
		return cp.Dst, path.Base(src), false, nil
	default:
		return path.Dir(cp.Dst), path.Base(cp.Dst), false, nil
	}
}

// retarStage rewrites a stage's archive for its destination: the top
// entry top renamed to name, or for a directory dropped with its
// children's names made relative; owned by root.
func retarStage(r io.Reader, w io.Writer, top, name string, isDir bool) error {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		n := strings.TrimSuffix(hdr.Name, "/")
		rest, under := strings.CutPrefix(n, top+"/")
		switch {
		case n == top && isDir:
			continue
		case n == top:
			n = name
		case under && isDir:
			n = rest
		case under:
			n = name + "/" + rest
		default:
			return fmt.Errorf("unexpected entry %q in the stage's archive", hdr.Name)
		}
		hdr.Name = n
		if hdr.Typeflag == tar.TypeDir {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	return tw.Close()
}
