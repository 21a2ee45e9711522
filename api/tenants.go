package api

import "time"

// Tenant owns sandboxes, volumes, snapshots, keys and leases.
type Tenant struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// CreateTenantRequest is the body of POST /v1/tenants.
type CreateTenantRequest struct {
	Name string `json:"name"`
}

// APIKey is an API key as listed: never its secret.
type APIKey struct {
	ID        string     `json:"id"`
	Prefix    string     `json:"prefix"`
	Name      string     `json:"name,omitempty"`
	Tenant    string     `json:"tenant"`
	Role      string     `json:"role,omitempty"`
	Scopes    []string   `json:"scopes"`
	CreatedAt time.Time  `json:"created_at"`
	CreatedBy string     `json:"created_by,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// CreateAPIKeyRequest is the body of POST /v1/keys. Tenant is the key's
// tenant (a tenant's own key may only name its own, or leave it empty);
// Scopes, if any, narrow the role's; ExpiresInSeconds, if set, is the
// key's lifetime. A key made by an expiring key ends with it at the
// latest (a later expiry is refused; none inherits the maker's).
type CreateAPIKeyRequest struct {
	Name   string   `json:"name,omitempty"`
	Tenant string   `json:"tenant,omitempty"`
	Role   string   `json:"role"`
	Scopes []string `json:"scopes,omitempty"`
	// ExpiresInSeconds is the key's lifetime. A key made by an expiring
	// key ends with it at the latest: a later expiry is 403, none
	// inherits the maker's.
	ExpiresInSeconds int64 `json:"expires_in_seconds,omitempty"`
}

// CreatedAPIKey is the answer of POST /v1/keys: the only time the key
// itself is shown.
type CreatedAPIKey struct {
	APIKey
	Key string `json:"key"`
}

// CreateLeaseRequest is the body of POST /v1/sandboxes/{id}/leases:
// scopes among exec, files and ports (the lease always reads its own
// sandbox and events) and its lifetime (0: one hour).
type CreateLeaseRequest struct {
	Scopes     []string `json:"scopes,omitempty"`
	TTLSeconds int64    `json:"ttl_seconds,omitempty"`
}

// Lease is a minted lease token.
type Lease struct {
	ID        string    `json:"id"`
	SandboxID string    `json:"sandbox_id"`
	Scopes    []string  `json:"scopes"`
	ExpiresAt time.Time `json:"expires_at"`
	Token     string    `json:"token"`
}

// CreatePortTokenRequest is the body of POST
// /v1/sandboxes/{id}/ports/{port}/token: the token's lifetime (0: one hour).
type CreatePortTokenRequest struct {
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
}

// PortToken opens one port of one sandbox. Browsers use BrowserURL (set
// when the daemon has a --domain): the port's own host name
// {port}-{id}.{domain} with the token in the berth_port_token query
// parameter, which the proxy turns into a cookie of that host alone.
// Non-browser clients use URL (relative to the API's base, the
// path-routed proxy) with the token in the X-Berth-Port-Token header: that
// route takes no cookie and no query token, and its answers are sandboxed
// (an opaque origin) in a browser.
type PortToken struct {
	// ID names the token's record: GET /v1/sandboxes/{id}/port-tokens
	// lists it, DELETE /v1/sandboxes/{id}/port-tokens/{token} revokes it.
	ID         string    `json:"id"`
	SandboxID  string    `json:"sandbox_id"`
	Port       int       `json:"port"`
	Token      string    `json:"token"`
	URL        string    `json:"url"`
	BrowserURL string    `json:"browser_url,omitempty"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// PortTokenInfo is a port token's record as listed: never its secret.
type PortTokenInfo struct {
	ID        string     `json:"id"`
	SandboxID string     `json:"sandbox_id"`
	Port      int        `json:"port"`
	CreatedBy string     `json:"created_by"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}
