package store

import "context"

// TenantTemplates reaches templates by owning tenant. Tenant "" is the
// host's shared catalogue; a tenant's own template of a name shadows the
// shared one of that name for that tenant, and no tenant ever reaches
// another tenant's template (such a name is ErrNotFound, as if it did not
// exist).
type TenantTemplates interface {
	// GetTenantTemplate finds the template tenant owns by that name
	// (exactly: no fallback to the shared catalogue).
	GetTenantTemplate(ctx context.Context, tenant, name string) (*Template, error)
	// ResolveTemplate is the name lookup of a create: the caller's own
	// template first, then the shared catalogue's.
	ResolveTemplate(ctx context.Context, tenant, name string) (*Template, error)
	// ListTenantTemplates returns a page of the templates tenant sees,
	// ordered by name: its own, and the shared catalogue's it does not
	// shadow with one of the same name (so each name once, as
	// ResolveTemplate would find it).
	ListTenantTemplates(ctx context.Context, tenant string, p Page) ([]*Template, string, error)
	// DeleteTenantTemplate removes the template tenant owns by that name.
	DeleteTenantTemplate(ctx context.Context, tenant, name string) error
	// TemplateLayers returns every layer id any template of any tenant
	// references (each once): layer GC keeps them, since layers are
	// content-addressed and shared across tenants.
	TemplateLayers(ctx context.Context) ([]string, error)
}
