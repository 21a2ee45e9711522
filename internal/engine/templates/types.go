package templates

import (
	"context"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/image"
)

// ImportProgress is how far an import is: bytes read of layer Layer of
// Layers (see image.Progress).
type ImportProgress = image.Progress

// WithImportProgress returns a context under which imports and uploads
// report to fn, from the goroutines unpacking layers, one call at a time.
func WithImportProgress(ctx context.Context, fn func(ImportProgress)) context.Context {
	return image.WithProgress(ctx, fn)
}

// ImportRequest imports an image as a template: exactly one of Path (an OCI
// layout directory or a docker-save tarball on this host) and Ref (a
// registry reference).
type ImportRequest struct {
	Name     string
	Path     string
	Ref      string
	Insecure bool // allow plain-HTTP registries
	// Auth, if set, is the registry account of this pull alone (never
	// stored); see registryCtx.
	Auth *image.RequestAuth
	// Service, if set, becomes the template's supervised service.
	Service *ServiceRequest
}

// ServiceRequest names a template's service: Cmd, or with FromImage the
// image's entrypoint and cmd.
type ServiceRequest struct {
	Cmd         []string
	FromImage   bool
	Restart     string
	MaxRestarts int
	// ReadyPort, if set, is a port the service listens on: a create
	// waits for it (store.ServiceSpec.ReadyPort).
	ReadyPort int
}

// BuildRequest builds a template by running shell steps in a sandbox made
// from From.
type BuildRequest struct {
	Name    string
	From    string
	Run     []string
	Env     map[string]string
	Timeout time.Duration // per step; 0 = an hour
	// Service replaces the base's supervised service; nil keeps it.
	Service *ServiceRequest
	// Network is the steps' network mode ("" or "none": loopback only;
	// "egress": Allow's destinations, under the egress policy and flow
	// log of any sandbox).
	Network string
	Allow   []string
}

// ApplyRequest is a declarative template file and the files its copy
// steps name (a tar archive).
type ApplyRequest struct {
	Spec  string
	Files []byte
}

// Event is a build's progress: output of step Step (1-based; 0 for set-up).
type Event struct {
	Step   int
	Stream string
	Data   []byte
}

// registryCtx is ctx for a registry transfer (a pull or a push). The
// daemon's registry credentials (serve --registry-auth) are the host's: a
// tenant's transfer uses only the account its request gives, else none,
// so a tenant can neither read the operator's private images nor write to
// the operator's repositories through the daemon. The host's transfer uses
// its request's account when it gives one, else the daemon's.
func registryCtx(ctx context.Context, a *image.RequestAuth) context.Context {
	if engine.CallerTenant(ctx) != "" || a != nil {
		return image.WithRequestAuth(ctx, a)
	}
	return ctx
}
