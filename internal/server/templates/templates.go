// Package templates serves the template routes: listing and reading
// templates (with their warm pools), importing, uploading and building
// them (from steps, a Dockerfile or an apply file, with their progress as
// NDJSON), and sizing their pools. The routes are mounted by the root
// package server's route table.
package templates

import (
	"context"
	"io"
	"net/http"
	"strings"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/engine/pools"
	enginetemplates "github.com/berth-sh/berth/internal/engine/templates"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/identity"
	"github.com/berth-sh/berth/internal/server/convert"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
)

// Engine is what the template routes need of the engine.
type Engine interface {
	ListTemplates(ctx context.Context, p store.Page) ([]*store.Template, string, error)
	ResolveTemplate(ctx context.Context, tenant, name string) (*store.Template, error)
	DeleteTemplate(ctx context.Context, name string) error
	ImportTemplate(ctx context.Context, req *enginetemplates.ImportRequest) (*store.Template, error)
	UploadTemplate(ctx context.Context, name string, r io.Reader) (*store.Template, error)
	PushTemplate(ctx context.Context, req *enginetemplates.PushRequest) (*enginetemplates.Pushed, error)
	BuildTemplate(ctx context.Context, req *enginetemplates.BuildRequest, actor string, progress func(enginetemplates.Event)) (*store.Template, error)
	BuildDockerfile(ctx context.Context, req *enginetemplates.DockerfileRequest, actor string, progress func(enginetemplates.Event)) (*store.Template, error)
	Apply(ctx context.Context, req *enginetemplates.ApplyRequest, actor string, progress func(enginetemplates.Event)) (*store.Template, error)
	SetPool(ctx context.Context, name string, min int) (*pools.Pool, error)
	ClearPool(ctx context.Context, name string) (*pools.Pool, error)
	Pool(ctx context.Context, name string) (*pools.Pool, error)
	Pools(ctx context.Context) ([]pools.Pool, error)
}

// Handlers serves the template routes.
type Handlers struct {
	E Engine
}

// List serves GET /v1/templates.
func (h *Handlers) List(w http.ResponseWriter, r *http.Request) {
	p, err := rest.PageOf(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	ts, next, err := h.E.ListTemplates(r.Context(), p)
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.SetNext(w, next)
	out := make([]api.Template, 0, len(ts))
	for _, t := range ts {
		out = append(out, h.withPool(t))
	}
	rest.JSON(w, 200, out)
}

// withPool is t as a list shows it: its build's flow counts without the
// flows, and its warm pool.
func (h *Handlers) withPool(t *store.Template) api.Template {
	out := ToAPI(t)
	if out.Build != nil { // a list gives the flows' counts, not the flows
		for i := range out.Build.Steps {
			out.Build.Steps[i].Flows = nil
		}
	}
	// The pool of t itself: read as t's tenant, whose name resolves to t.
	ctx := context.Background()
	if t.Tenant != "" {
		ctx = identity.With(ctx, identity.Caller{Tenant: t.Tenant})
	}
	if p, err := h.E.Pool(ctx, t.Name); err == nil && (p.Min > 0 || p.Ready > 0) {
		out.Pool = convert.PoolPtrToAPI(p)
	}
	return out
}

// ToAPI is a template as the API shows it (its build's flows included).
func ToAPI(t *store.Template) api.Template {
	return api.Template{Tenant: t.Tenant, Name: t.Name, Layers: t.Layers, Source: t.Source, Builtin: t.Builtin,
		Size: t.Size, Env: t.Config.Env, Workdir: t.Config.Workdir, User: t.Config.User,
		Entrypoint: t.Config.Entrypoint, Cmd: t.Config.Cmd, ExposedPorts: t.Config.ExposedPorts,
		StopSignal: t.Config.StopSignal, CreatedAt: t.CreatedAt, Build: buildRecordToAPI(t.Config.Build), Labels: t.Config.Labels}
}

func buildRecordToAPI(b *store.BuildRecord) *api.TemplateBuild {
	if b == nil {
		return nil
	}
	out := &api.TemplateBuild{Steps: make([]api.TemplateBuildStep, 0, len(b.Steps))}
	for _, st := range b.Steps {
		as := api.TemplateBuildStep{Step: st.Step, Desc: st.Desc, Line: st.Line, Cached: st.Cached, Network: st.Network,
			Allow: st.Allow, Sandbox: st.Sandbox, FlowCount: len(st.Flows) + st.FlowsDropped, FlowsDropped: st.FlowsDropped}
		for _, f := range st.Flows {
			as.Flows = append(as.Flows, api.Flow{Seq: uint64(f.ID), Time: f.Time, Kind: f.Kind, Proto: f.Proto, Src: f.Src,
				Dst: f.Dst, Name: f.Name, Decision: f.Decision, Rule: f.Rule})
		}
		out.Steps = append(out.Steps, as)
	}
	return out
}

// Get serves GET /v1/templates/{name}.
func (h *Handlers) Get(w http.ResponseWriter, r *http.Request) {
	// The caller's own template of that name, else the shared one.
	t, err := h.E.ResolveTemplate(r.Context(), rest.Tenant(r), r.PathValue("name"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	out := h.withPool(t)
	out.Build = buildRecordToAPI(t.Config.Build) // one template: with its build's flows
	rest.JSON(w, 200, out)
}

// Delete serves DELETE /v1/templates/{name}.
func (h *Handlers) Delete(w http.ResponseWriter, r *http.Request) {
	if err := h.E.DeleteTemplate(r.Context(), r.PathValue("name")); err != nil {
		rest.Error(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// Import serves POST /v1/templates/import.
func (h *Handlers) Import(w http.ResponseWriter, r *http.Request) {
	var req api.ImportTemplateRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	importStream(w, r, func(ctx context.Context) (*store.Template, error) {
		return h.E.ImportTemplate(ctx, convert.ImportRequest(&req))
	})
}

// Upload serves PUT /v1/templates/{name}/archive.
func (h *Handlers) Upload(w http.ResponseWriter, r *http.Request) {
	importStream(w, r, func(ctx context.Context) (*store.Template, error) {
		return h.E.UploadTemplate(ctx, r.PathValue("name"), r.Body)
	})
}

// Push serves POST /v1/templates/{name}/push. A client that accepts NDJSON
// gets the layers' upload progress as api.PushEvent lines, then the
// result or the error; any other gets the result (200) or the error.
func (h *Handlers) Push(w http.ResponseWriter, r *http.Request) {
	var req api.PushTemplateRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	run := func(ctx context.Context) (*api.PushResult, error) {
		p, err := h.E.PushTemplate(ctx, &enginetemplates.PushRequest{Name: r.PathValue("name"), Ref: req.Ref, Insecure: req.Insecure,
			Auth: convert.RegistryAuth(req.RegistryAuth)})
		if err != nil {
			return nil, err
		}
		return &api.PushResult{Ref: p.Ref, Digest: p.Digest, Layers: p.Layers}, nil
	}
	if !strings.Contains(r.Header.Get("Accept"), "application/x-ndjson") {
		res, err := run(r.Context())
		if err != nil {
			rest.Error(w, err)
			return
		}
		rest.JSON(w, http.StatusOK, res)
		return
	}
	nd := rest.NewNDJSON(w)
	ctx := enginetemplates.WithImportProgress(r.Context(), func(p enginetemplates.ImportProgress) {
		_ = nd.Send(api.PushEvent{Progress: progressToAPI(p)})
	})
	res, err := run(ctx)
	if err != nil {
		if nd.Err() == nil && !rest.HeaderWritten(w) {
			rest.Error(w, err)
			return
		}
		_ = nd.Send(api.PushEvent{Error: rest.StreamError(w, err)})
		return
	}
	_ = nd.Send(api.PushEvent{Result: res})
}

func progressToAPI(p enginetemplates.ImportProgress) *api.ImportProgress {
	return &api.ImportProgress{Layer: p.Layer, Layers: p.Layers, Digest: p.Digest,
		Bytes: p.Bytes, Size: p.Size, Done: p.Done, Cached: p.Cached, TotalBytes: p.TotalBytes, TotalSize: p.TotalSize}
}

// importStream runs an import. A client that accepts NDJSON gets the
// layers' progress as api.ImportEvent lines, then the template or the
// error; any other gets the template (201) or the error alone.
func importStream(w http.ResponseWriter, r *http.Request, run func(context.Context) (*store.Template, error)) {
	if !strings.Contains(r.Header.Get("Accept"), "application/x-ndjson") {
		t, err := run(r.Context())
		if err != nil {
			rest.Error(w, err)
			return
		}
		rest.JSON(w, http.StatusCreated, ToAPI(t))
		return
	}
	nd := rest.NewNDJSON(w)
	ctx := enginetemplates.WithImportProgress(r.Context(), func(p enginetemplates.ImportProgress) {
		_ = nd.Send(api.ImportEvent{Progress: progressToAPI(p)})
	})
	t, err := run(ctx)
	if err != nil {
		if nd.Err() == nil && !rest.HeaderWritten(w) {
			rest.Error(w, err)
			return
		}
		_ = nd.Send(api.ImportEvent{Error: rest.StreamError(w, err)})
		return
	}
	tt := ToAPI(t)
	_ = nd.Send(api.ImportEvent{Template: &tt})
}

// Build serves POST /v1/templates/build.
func (h *Handlers) Build(w http.ResponseWriter, r *http.Request) {
	var req api.BuildTemplateRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	buildStream(w, ToAPI, func(progress func(enginetemplates.Event)) (*store.Template, error) {
		return h.E.BuildTemplate(r.Context(), convert.BuildRequest(&req), rest.Actor(r), progress)
	})
}

// buildStream runs a build whose progress streams as NDJSON lines
// (api.BuildEvent), then the template (as conv gives it) or the error. An
// error before the first line is a plain error response, with its status
// and code; after it, the stream's last line.
func buildStream(w http.ResponseWriter, conv func(*store.Template) api.Template, run func(progress func(enginetemplates.Event)) (*store.Template, error)) {
	nd := rest.NewNDJSON(w)
	t, err := run(func(ev enginetemplates.Event) { _ = nd.Send(convert.BuildEventToAPI(ev)) })
	if err != nil {
		if nd.Err() == nil && !rest.HeaderWritten(w) {
			rest.Error(w, err)
			return
		}
		_ = nd.Send(api.BuildEvent{Error: rest.StreamError(w, err)})
		return
	}
	tt := conv(t)
	_ = nd.Send(api.BuildEvent{Template: &tt})
}

// SetPool serves PUT /v1/templates/{name}/pool.
func (h *Handlers) SetPool(w http.ResponseWriter, r *http.Request) {
	var req api.PoolRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	var p *pools.Pool
	var err error
	switch {
	case req.Auto && req.Min != 0:
		err = errdefs.Invalid("give min or auto, not both")
	case req.Auto:
		p, err = h.E.ClearPool(r.Context(), r.PathValue("name"))
	default:
		p, err = h.E.SetPool(r.Context(), r.PathValue("name"), req.Min)
	}
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, convert.PoolPtrToAPI(p))
}

// GetPool serves GET /v1/templates/{name}/pool.
func (h *Handlers) GetPool(w http.ResponseWriter, r *http.Request) {
	// Pool resolves the name as the caller sees it (404 if it cannot).
	p, err := h.E.Pool(r.Context(), r.PathValue("name"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, convert.PoolPtrToAPI(p))
}

// ListPools serves GET /v1/pools.
func (h *Handlers) ListPools(w http.ResponseWriter, r *http.Request) {
	ps, err := h.E.Pools(r.Context())
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, convert.Slice(ps, convert.PoolToAPI))
}

// Apply serves POST /v1/apply.
func (h *Handlers) Apply(w http.ResponseWriter, r *http.Request) {
	var req api.ApplyRequest
	if err := input.DecodeLarge(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	buildStream(w, h.withPool, func(progress func(enginetemplates.Event)) (*store.Template, error) {
		return h.E.Apply(r.Context(), convert.ApplyRequest(&req), rest.Actor(r), progress)
	})
}
