// Package store defines berth's durable record store: sandboxes (including
// tombstones), events, templates and API keys. The Store interface is the
// contract; sqlite (embedded default) and, later, postgres implement it, and
// storetest is the conformance suite every implementation must pass.
//
// Driver errors never leave this package tree: implementations map "no rows"
// to errdefs.ErrNotFound and unique violations to errdefs.ErrConflict.
package store

import (
	"context"
	"time"

	"github.com/berth-sh/berth/internal/sandbox"
)

// Template is a named, read-only root filesystem plus defaults.
type Template struct {
	Name string `json:"name"`
	// Layers are layer ids (content digests, "sha256:..."), bottom first.
	Layers []string `json:"layers"`
	// Config carries the image defaults: env, workdir, user, entry command.
	Config TemplateConfig `json:"config"`
	// Builtin marks templates berth provides without a download.
	Builtin bool `json:"builtin"`
	// Source says where it came from: "oci-layout:/path", "docker-archive:/path",
	// "registry:ref", "build:base", "builtin:host".
	Source    string    `json:"source"`
	Size      int64     `json:"size"` // bytes of unpacked layers
	CreatedAt time.Time `json:"created_at"`
}

// TemplateConfig holds a template's defaults.
type TemplateConfig struct {
	Env       []string           `json:"env,omitempty"`
	Workdir   string             `json:"workdir,omitempty"`
	User      string             `json:"user,omitempty"`
	Cmd       []string           `json:"cmd,omitempty"`
	Resources *sandbox.Resources `json:"resources,omitempty"`
	Timeout   time.Duration      `json:"timeout,omitempty"`
	// Policy holds default lifecycle policies; a request's own win field
	// by field.
	Policy *sandbox.Policy `json:"policy,omitempty"`
	// Network and Allow are the default network mode and egress rules.
	Network string   `json:"network,omitempty"`
	Allow   []string `json:"allow,omitempty"`
	// HostUsr marks the builtin template that bind-mounts the host's /usr
	// read-only instead of carrying it in a layer.
	HostUsr bool `json:"host_usr,omitempty"`
}

// APIKey is a bearer credential. Only the SHA-256 of the secret is stored.
type APIKey struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Tenant    string    `json:"tenant"`
	Hash      []byte    `json:"-"`
	Scopes    []string  `json:"scopes"`
	CreatedAt time.Time `json:"created_at"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
}

// Volume states.
const (
	VolumeAvailable = "available" // exists, not in use
	VolumeAttached  = "attached"  // used by a live sandbox
	VolumeDeleted   = "deleted"   // tombstone
)

// Volume is the durable record of a named, quota-limited filesystem.
type Volume struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Tenant    string    `json:"tenant"`
	State     string    `json:"state"`
	SizeBytes int64     `json:"size_bytes"`
	Inodes    int64     `json:"inodes"`
	SandboxID string    `json:"sandbox_id,omitempty"` // attached to
	Keep      bool      `json:"keep"`                 // outlives its sandbox
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	DeletedAt time.Time `json:"deleted_at,omitzero"`
	// Generation: updates are compare-and-swap on it, as for sandboxes.
	Generation int64 `json:"generation"`
}

// WebhookDelivery is one attempt to deliver an event to a webhook.
type WebhookDelivery struct {
	ID      int64     `json:"id"`
	EventID int64     `json:"event_id"`
	URL     string    `json:"url"`
	Attempt int       `json:"attempt"`
	Status  int       `json:"status"` // HTTP status; 0 if no response
	Error   string    `json:"error,omitempty"`
	Time    time.Time `json:"time"`
}

// Snapshot is the record of a crash-consistent copy of a sandbox's
// filesystem state; its data lives in the storage pool.
type Snapshot struct {
	ID        string       `json:"id"`
	Name      string       `json:"name"`
	Tenant    string       `json:"tenant"`
	SandboxID string       `json:"sandbox_id"`
	Template  string       `json:"template"`
	Layers    []string     `json:"layers"`
	Spec      sandbox.Spec `json:"spec"`
	Parent    string       `json:"parent,omitempty"`
	SizeBytes int64        `json:"size_bytes"`
	CreatedAt time.Time    `json:"created_at"`
	ExpiresAt time.Time    `json:"expires_at,omitzero"`
}

// Flow is one recorded connection attempt or DNS query of a sandbox.
type Flow struct {
	ID        int64     `json:"id"`
	SandboxID string    `json:"sandbox_id"`
	Time      time.Time `json:"time"`
	Kind      string    `json:"kind"`
	Proto     string    `json:"proto"`
	Src       string    `json:"src"`
	Dst       string    `json:"dst"`
	Name      string    `json:"name,omitempty"`
	Decision  string    `json:"decision"`
	Rule      string    `json:"rule,omitempty"`
}

// IdempotencyKey is the record of one Idempotency-Key: written before the
// request acts, completed with its answer.
type IdempotencyKey struct {
	Scope string `json:"scope"` // the caller (tenant and actor)
	Route string `json:"route"` // the route pattern
	Key   string `json:"key"`
	// RequestHash identifies the request (method, path, canonical body).
	RequestHash string `json:"request_hash"`
	// IDs are the ids the objects the request makes get, chosen before
	// they exist.
	IDs []string `json:"ids"`
	// Owner names the attempt acting on a pending key.
	Owner string `json:"owner"`
	// Done: the answer below is final.
	Done        bool      `json:"done"`
	Status      int       `json:"status"`
	ContentType string    `json:"content_type"`
	Body        []byte    `json:"body"`
	CreatedAt   time.Time `json:"created_at"`
	ExpiresAt   time.Time `json:"expires_at"`
}

// SandboxFilter selects sandboxes in ListSandboxes.
type SandboxFilter struct {
	Tenant         string          // "" = all tenants
	Node           string          // "" = all nodes
	States         []sandbox.State // empty = all states
	IncludeDeleted bool            // tombstones are excluded unless set
	Limit          int             // 0 = no limit
}

// Store is the contract of berth's durable store. All methods are safe for
// concurrent use.
type Store interface {
	// CreateSandbox inserts a new record; a live sandbox with the same
	// tenant and name gives ErrConflict.
	CreateSandbox(ctx context.Context, sb *sandbox.Sandbox) error
	GetSandbox(ctx context.Context, id string) (*sandbox.Sandbox, error)
	// GetSandboxByName finds a live (not deleted) sandbox by name.
	GetSandboxByName(ctx context.Context, tenant, name string) (*sandbox.Sandbox, error)
	ListSandboxes(ctx context.Context, f SandboxFilter) ([]*sandbox.Sandbox, error)
	// UpdateSandbox writes sb if its Generation still matches the stored one
	// (compare-and-swap) and increments sb.Generation; on a mismatch it
	// returns ErrConflict and writes nothing.
	UpdateSandbox(ctx context.Context, sb *sandbox.Sandbox) error
	// PurgeSandbox removes a record and its events entirely (retention of tombstones).
	PurgeSandbox(ctx context.Context, id string) error

	// AppendEvent records ev and sets ev.ID.
	AppendEvent(ctx context.Context, ev *sandbox.Event) error
	// ListEvents returns a sandbox's events oldest first, with ID > afterID.
	ListEvents(ctx context.Context, sandboxID string, afterID int64, limit int) ([]*sandbox.Event, error)

	PutTemplate(ctx context.Context, t *Template) error // insert or replace by name
	GetTemplate(ctx context.Context, name string) (*Template, error)
	ListTemplates(ctx context.Context) ([]*Template, error)
	DeleteTemplate(ctx context.Context, name string) error

	// CreateVolume inserts a volume; a live volume with the same tenant and
	// name gives ErrConflict.
	CreateVolume(ctx context.Context, v *Volume) error
	GetVolume(ctx context.Context, id string) (*Volume, error)
	// GetVolumeByName finds a live (not deleted) volume.
	GetVolumeByName(ctx context.Context, tenant, name string) (*Volume, error)
	// ListVolumes returns volumes ordered by creation; tenant "" = all.
	ListVolumes(ctx context.Context, tenant string, includeDeleted bool) ([]*Volume, error)
	// UpdateVolume is compare-and-swap on Generation, like UpdateSandbox.
	UpdateVolume(ctx context.Context, v *Volume) error

	// ListEventsSince returns events of every sandbox with ID > afterID,
	// oldest first: the outbox webhooks are delivered from.
	ListEventsSince(ctx context.Context, afterID int64, limit int) ([]*sandbox.Event, error)
	// WebhookCursor returns the last event id handled for url, and false if
	// none is stored.
	WebhookCursor(ctx context.Context, url string) (int64, bool, error)
	SetWebhookCursor(ctx context.Context, url string, eventID int64) error
	RecordWebhookDelivery(ctx context.Context, d *WebhookDelivery) error
	ListWebhookDeliveries(ctx context.Context, eventID int64) ([]*WebhookDelivery, error)

	// CreateSnapshot inserts a snapshot; a name taken in the tenant gives
	// ErrConflict.
	CreateSnapshot(ctx context.Context, sn *Snapshot) error
	GetSnapshot(ctx context.Context, id string) (*Snapshot, error)
	GetSnapshotByName(ctx context.Context, tenant, name string) (*Snapshot, error)
	// ListSnapshots lists a sandbox's snapshots ("" = all), oldest first.
	ListSnapshots(ctx context.Context, sandboxID string) ([]*Snapshot, error)
	DeleteSnapshot(ctx context.Context, id string) error

	// BuildCache maps a build step's content key to the layer it made.
	GetBuildCache(ctx context.Context, key string) (string, error)
	PutBuildCache(ctx context.Context, key, layer string) error

	// SetPool sets a template's warm-pool size (0 removes it).
	SetPool(ctx context.Context, template string, min int) error
	ListPools(ctx context.Context) (map[string]int, error)

	// AppendFlows records flows and keeps at most keep per sandbox (the
	// oldest go first).
	AppendFlows(ctx context.Context, flows []*Flow, keep int) error
	// ListFlows returns a sandbox's flows with ID > afterID, oldest first.
	ListFlows(ctx context.Context, sandboxID string, afterID int64, limit int) ([]*Flow, error)

	// AllocateIDSlot gives sandboxID the lowest free host-id slot below
	// limit, recorded for node, or the slot it already holds; every slot
	// has at most one holder, also under concurrent allocators. All slots
	// taken gives ErrExhausted.
	AllocateIDSlot(ctx context.Context, sandboxID, node string, limit int) (int, error)
	// ReleaseIDSlot frees sandboxID's slot for reuse; none is not an error.
	ReleaseIDSlot(ctx context.Context, sandboxID string) error
	// ListIDSlots returns the allocated slots by sandbox id (node "" = all).
	ListIDSlots(ctx context.Context, node string) (map[string]int, error)

	// PutIdempotencyKey inserts k unless its (Scope, Route, Key) is
	// stored and not expired at k.CreatedAt: then it returns the stored
	// record and false. Of concurrent puts of one key exactly one inserts.
	PutIdempotencyKey(ctx context.Context, k *IdempotencyKey) (*IdempotencyKey, bool, error)
	GetIdempotencyKey(ctx context.Context, scope, route, key string) (*IdempotencyKey, error)
	// UpdateIdempotencyKey writes k's ids, owner, state and answer if the
	// stored key is pending and held by owner (compare-and-swap), else
	// ErrConflict (ErrNotFound if it is gone).
	UpdateIdempotencyKey(ctx context.Context, k *IdempotencyKey, owner string) error
	// DeleteIdempotencyKey removes a pending key held by owner (an attempt
	// whose answer is not to be kept); another owner's is left alone.
	DeleteIdempotencyKey(ctx context.Context, scope, route, key, owner string) error
	// PurgeIdempotencyKeys removes keys expired at now and says how many.
	PurgeIdempotencyKeys(ctx context.Context, now time.Time) (int64, error)

	CreateAPIKey(ctx context.Context, k *APIKey) error
	// GetAPIKeyByHash returns a key, revoked or not; callers check RevokedAt.
	GetAPIKeyByHash(ctx context.Context, hash []byte) (*APIKey, error)
	ListAPIKeys(ctx context.Context, tenant string) ([]*APIKey, error)
	RevokeAPIKey(ctx context.Context, id string, at time.Time) error

	Close() error
}
