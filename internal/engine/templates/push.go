package templates

import (
	"context"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/image"
)

// PushRequest pushes template Name to registry reference Ref.
type PushRequest struct {
	Name     string
	Ref      string
	Insecure bool // allow a plain-HTTP registry
	// Auth, if set, is the registry account of this push alone (never
	// stored); see registryCtx.
	Auth *image.RequestAuth
}

// Pushed is what a push wrote: the reference, the manifest digest and the
// pushed layers' diffIDs.
type Pushed = image.Pushed

// PushTemplate writes a template the caller can see as an OCI image to a
// registry (image.Store.Push), with the account registryCtx picks.
// Like a pull, it makes the daemon connect where the request says, so a
// tenant may push only when the daemon allows tenant pulls (serve
// --tenant-pulls), and only a template it resolves: its own or the shared
// catalogue's, never another tenant's (404, as for a read). A template on
// the host's /usr (the builtin base and what is built on it) has no image
// of its own to push.
func (m *Builder) PushTemplate(ctx context.Context, req *PushRequest) (*Pushed, error) {
	// Another tenant's template is not found, whatever else is wrong.
	tenant := engine.CallerTenant(ctx)
	t, err := m.e.ResolveTemplate(ctx, tenant, req.Name)
	if err != nil {
		return nil, err
	}
	if tenant != "" && !m.e.Config().TenantPulls {
		return nil, errdefs.Permission("registry pushes by tenants are off on this daemon (serve --tenant-pulls): the daemon would connect where the request says")
	}
	if req.Ref == "" {
		return nil, errdefs.Invalid("ref is required")
	}
	if t.Config.HostUsr {
		return nil, errdefs.Invalid("template %q runs on the host's /usr (it is or is built on the builtin %q): it has no image of its own to push", t.Name, BuiltinTemplate)
	}
	c := t.Config
	return m.e.Images().Push(registryCtx(ctx, req.Auth), req.Ref, image.PushImage{
		Layers: t.Layers,
		Config: image.Config{Env: c.Env, Workdir: c.Workdir, User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd,
			ExposedPorts: c.ExposedPorts, StopSignal: c.StopSignal},
		Labels:  c.Labels,
		Created: t.CreatedAt,
	}, req.Insecure)
}
