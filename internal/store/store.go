// Package store defines berth's durable record store: sandboxes (including
// tombstones), events, templates, volumes, snapshots, the webhook outbox,
// API keys and the engine's bookkeeping. Store is the contract, made of one
// small interface per resource so a consumer can ask for the least it
// needs; sqlite (embedded default) and postgres implement it, and storetest
// is the conformance suite every implementation must pass.
//
// Three rules hold for every implementation:
//   - A state change and the events describing it commit together
//     (CreateSandbox and UpdateSandbox take the events): events are the
//     webhook outbox, so an event is never lost to a crash between writes.
//   - Every read of an owned object (sandbox, its events and flows, volume,
//     snapshot, API key) names the Owner it reads for; another owner's
//     object is ErrNotFound, as if it did not exist.
//   - Lists are paged with an opaque cursor in a stable order (see Page).
//
// Driver errors never leave this package tree: implementations map "no rows"
// to errdefs.ErrNotFound and unique violations to errdefs.ErrConflict.
//
// Lists are in keyset order (creation time then id; templates by name;
// events by id), so paging under concurrent inserts never repeats or
// skips. ListAllEvents reads events across sandboxes (an EventFilter), and
// EventsWritten hands out a channel closed at the next commit that appended
// events through that handle, which the live event stream wakes on. The
// store also allocates per-sandbox host id ranges (id_slots: lowest free
// slot, unique under concurrent allocators) and keeps idempotency keys
// (put-if-absent, updates a compare-and-swap on the owning attempt).
// Admission (LockTenant) serialises a tenant's quota-counted writes across
// daemons (docs/api.md, "Quotas and rate limits"). sqlstore is the portable
// SQL (cursors are base64url of list tag and sort key, strictly decoded:
// FuzzDecodeCursor); sqlite opens the embedded database (modernc, WAL, one
// writer connection with BEGIN IMMEDIATE); migrations are embedded numbered
// SQL files.
package store

import (
	"context"
	"fmt"
	"time"

	"github.com/berth-sh/berth/internal/sandbox"
)

// Template is a named, read-only root filesystem plus defaults.
type Template struct {
	Name string `json:"name"`
	// Tenant owns the template; "" is the host's shared catalogue
	// (builtin and host-imported templates), which every tenant reads.
	// Names are unique per tenant.
	Tenant string `json:"tenant,omitempty"`
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
	// Service is a supervised service the template's sandboxes run
	// (service.go).
	Service *ServiceSpec `json:"service,omitempty"`

	// Entrypoint and Cmd are the image's; the command they make is
	// Entrypoint followed by Cmd. Records from before Entrypoint was kept
	// hold that whole command in Cmd, which reads the same.
	Entrypoint []string `json:"entrypoint,omitempty"`
	// ExposedPorts ("8080/tcp") are shown, never published by themselves.
	ExposedPorts []string `json:"exposed_ports,omitempty"`
	// StopSignal is the image's STOPSIGNAL: stop sends it to a running
	// sandbox's processes before the kill (engine stop.go); "" is SIGTERM.
	StopSignal string `json:"stop_signal,omitempty"`

	// Build is how this template was built (build, apply, a Dockerfile):
	// its steps and the flows of those that ran with a network. It is the
	// template's own record: a template built on this one does not
	// inherit it.
	Build *BuildRecord `json:"build,omitempty"`
	// Labels are the image's (LABEL), shown, never interpreted.
	Labels map[string]string `json:"labels,omitempty"`
}

// BuildRecord is the record of a template's build.
type BuildRecord struct {
	Steps []BuildStep `json:"steps"`
}

// BuildStep is one step of a build as it ran (or was found in the cache).
type BuildStep struct {
	Step int    `json:"step"`
	Desc string `json:"desc"`
	// Line is the step's line in its Dockerfile (0: not from one).
	Line   int  `json:"line,omitempty"`
	Cached bool `json:"cached,omitempty"`
	// Network is the step's network mode ("none" or "egress") and Allow
	// its egress rules; Sandbox the build sandbox it ran in.
	Network string   `json:"network,omitempty"`
	Allow   []string `json:"allow,omitempty"`
	Sandbox string   `json:"sandbox,omitempty"`
	// Flows are the step's connection attempts and DNS queries (the
	// first MaxBuildFlows; FlowsDropped counts the rest).
	Flows        []Flow `json:"flows,omitempty"`
	FlowsDropped int    `json:"flows_dropped,omitempty"`
}

// MaxBuildFlows bounds the flows a build record keeps per step.
const MaxBuildFlows = 256

// APIKey is a bearer credential. Only the SHA-256 of the secret is stored.
type APIKey struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Tenant string `json:"tenant"`
	Hash   []byte `json:"-"`
	// Role is the key's role (admin, member, viewer; "" for a key made
	// before roles); Scopes what it holds, within the role's.
	Role      string    `json:"role,omitempty"`
	Scopes    []string  `json:"scopes"`
	CreatedAt time.Time `json:"created_at"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	// ExpiresAt, if set, is when the key stops authenticating.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Prefix is the key's printable, non-secret start ("berth_" and its
	// id): how an operator names it.
	Prefix string `json:"prefix,omitempty"`
	// CreatedBy is the actor that made the key.
	CreatedBy string `json:"created_by,omitempty"`
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

// Owner is whose objects a read may see: one tenant's (OwnedBy), or every
// tenant's (AnyOwner) for the engine's own work — the reconciler, pools,
// recovery, doctor. The zero value is the default tenant "", the owner of
// every record until tenancy fills it in.
type Owner struct {
	tenant string
	any    bool
}

// OwnedBy is the owner of tenant's objects.
func OwnedBy(tenant string) Owner { return Owner{tenant: tenant} }

// AnyOwner sees every tenant's objects. Only the engine's own work uses it;
// a request always reads as its caller's tenant.
var AnyOwner = Owner{any: true}

// Tenant returns the tenant o reads for, and false for AnyOwner.
func (o Owner) Tenant() (string, bool) { return o.tenant, !o.any }

// Sees reports whether o may read an object of tenant.
func (o Owner) Sees(tenant string) bool { return o.any || o.tenant == tenant }

func (o Owner) String() string {
	if o.any {
		return "any owner"
	}
	return fmt.Sprintf("tenant %q", o.tenant)
}

// MaxPage is the largest page the HTTP API serves; a store serves any.
const MaxPage = 1000

// Page asks for one page of a list. Lists are in a stable order (creation
// time then id; templates by name; events and flows by id), and a cursor is
// a position in that order, not an offset: paging while others insert or
// delete never returns an object twice and never skips one that existed
// throughout (objects inserted meanwhile may or may not appear).
type Page struct {
	// Limit is the most items to return; 0 returns all of them (the
	// engine's own sweeps; the API always sets one).
	Limit int
	// Cursor is "" for the first page, else a Next from the page before,
	// of the same list. A cursor that is not one is ErrInvalid.
	Cursor string
}

// SandboxFilter selects sandboxes in ListSandboxes. Every field narrows
// the query itself, so a page holds Limit matching sandboxes (a filter
// applied after paging would answer short or empty pages).
type SandboxFilter struct {
	Owner          Owner
	Node           string          // "" = all nodes
	States         []sandbox.State // empty = all states
	IncludeDeleted bool            // tombstones are excluded unless set
	// KeptRootStates are states admitted besides States only for a
	// sandbox whose whole writable root is on its own volume
	// (persistent with persist_root): its files survive them.
	KeptRootStates []sandbox.State
	// Labels selects sandboxes holding every one of these labels.
	Labels map[string]string
	// Template selects the sandboxes of this template ("" = any).
	Template string
	// StartedAfter (inclusive) and StartedBefore bound StartedAt (zero:
	// unbounded).
	StartedAfter, StartedBefore time.Time
	// NoPool leaves out unclaimed warm-pool members.
	NoPool bool
	// Pool, if set, keeps only the unclaimed members of that template's
	// warm pool (a claim reads its pool's members, not the node's
	// sandboxes); Pooled keeps the unclaimed members of every pool.
	Pool   string
	Pooled bool
	// Newest lists newest first (its cursors are its own).
	Newest bool
}

// VolumeFilter selects volumes in ListVolumes.
type VolumeFilter struct {
	Owner          Owner
	IncludeDeleted bool
}

// SnapshotFilter selects snapshots in ListSnapshots.
type SnapshotFilter struct {
	Owner     Owner
	SandboxID string // "" = of every sandbox
}

// Sandboxes are the sandbox records, tombstones included.
type Sandboxes interface {
	// CreateSandbox inserts a new record and, in the same transaction,
	// events (their SandboxID defaults to sb.ID; their IDs are set): both
	// or neither are written. A live sandbox with the same tenant and name
	// gives ErrConflict.
	CreateSandbox(ctx context.Context, sb *sandbox.Sandbox, events ...*sandbox.Event) error
	GetSandbox(ctx context.Context, o Owner, id string) (*sandbox.Sandbox, error)
	// GetSandboxByName finds a live (not deleted) sandbox by name; for
	// AnyOwner a name live in two tenants is ErrConflict.
	GetSandboxByName(ctx context.Context, o Owner, name string) (*sandbox.Sandbox, error)
	// ListSandboxes returns a page of sandboxes ordered by creation, and
	// the cursor of the next page ("" after the last).
	ListSandboxes(ctx context.Context, f SandboxFilter, p Page) ([]*sandbox.Sandbox, string, error)
	// UpdateSandbox writes sb if its Generation still matches the stored
	// one (compare-and-swap) and increments sb.Generation, and appends
	// events in the same transaction. On a mismatch it returns ErrConflict
	// and writes nothing; if an event cannot be written (an unknown
	// SandboxID: ErrNotFound) the update is rolled back too.
	UpdateSandbox(ctx context.Context, sb *sandbox.Sandbox, events ...*sandbox.Event) error
	// PurgeSandbox removes a record and its events entirely.
	PurgeSandbox(ctx context.Context, id string) error
}

// Events are the sandboxes' event logs.
type Events interface {
	// AppendEvent records ev (of an existing sandbox) and sets ev.ID. An
	// event that goes with a state change is written by Create- or
	// UpdateSandbox instead.
	AppendEvent(ctx context.Context, ev *sandbox.Event) error
	// ListEvents returns a page of a sandbox's events, oldest first, with
	// ID > afterID (and past p.Cursor). A sandbox o does not see has none.
	ListEvents(ctx context.Context, o Owner, sandboxID string, afterID int64, p Page) ([]*sandbox.Event, string, error)
	// ListAllEvents returns a page of the events of every sandbox f.Owner
	// sees that match f, oldest first, with ID > f.AfterID (and past
	// p.Cursor). Ids become visible in id order (see AppendEvent), so a
	// reader that follows them with AfterID never skips one.
	ListAllEvents(ctx context.Context, f EventFilter, p Page) ([]*sandbox.Event, string, error)
	// EventsWritten returns a channel that is closed when events are next
	// committed through this Store: a follower reads, then waits on the
	// channel it took before reading. Writers through another handle on
	// the same database (another daemon sharing PostgreSQL) do not close
	// it, so a follower polls as well.
	EventsWritten() <-chan struct{}
	// LatestEventID is the id of the newest event of any sandbox (0 with
	// none): where a reader that wants only what comes next begins.
	LatestEventID(ctx context.Context) (int64, error)
}

// EventFilter selects events in ListAllEvents.
type EventFilter struct {
	Owner      Owner
	SandboxIDs []string // empty = every sandbox Owner sees
	Types      []string // empty = every type
	AfterID    int64
}

// Webhooks is the outbox side of events: what webhook delivery reads and
// records. It spans every owner (webhooks are the daemon's).
type Webhooks interface {
	// ListEventsSince returns events of every sandbox with ID > afterID,
	// oldest first: the outbox webhooks are delivered from.
	ListEventsSince(ctx context.Context, afterID int64, limit int) ([]*sandbox.Event, error)
	// WebhookCursor returns the last event id handled for url, and false if
	// none is stored.
	WebhookCursor(ctx context.Context, url string) (int64, bool, error)
	SetWebhookCursor(ctx context.Context, url string, eventID int64) error
	RecordWebhookDelivery(ctx context.Context, d *WebhookDelivery) error
	ListWebhookDeliveries(ctx context.Context, eventID int64) ([]*WebhookDelivery, error)
}

// Templates are the named root filesystems of the host's shared catalogue
// (tenant ""), which every tenant reads. TenantTemplates (tenanttemplates.go)
// reaches the templates tenants own.
type Templates interface {
	// PutTemplate inserts or replaces by (t.Tenant, t.Name).
	PutTemplate(ctx context.Context, t *Template) error
	// GetTemplate finds a shared-catalogue template.
	GetTemplate(ctx context.Context, name string) (*Template, error)
	// ListTemplates returns a page of the shared catalogue ordered by name.
	ListTemplates(ctx context.Context, p Page) ([]*Template, string, error)
	// DeleteTemplate removes a shared-catalogue template.
	DeleteTemplate(ctx context.Context, name string) error
}

// Volumes are the volume records, tombstones included.
type Volumes interface {
	// CreateVolume inserts a volume; a live volume with the same tenant and
	// name gives ErrConflict.
	CreateVolume(ctx context.Context, v *Volume) error
	GetVolume(ctx context.Context, o Owner, id string) (*Volume, error)
	// GetVolumeByName finds a live (not deleted) volume; for AnyOwner a
	// name live in two tenants is ErrConflict.
	GetVolumeByName(ctx context.Context, o Owner, name string) (*Volume, error)
	// ListVolumes returns a page of volumes ordered by creation.
	ListVolumes(ctx context.Context, f VolumeFilter, p Page) ([]*Volume, string, error)
	// UpdateVolume is compare-and-swap on Generation, like UpdateSandbox.
	UpdateVolume(ctx context.Context, v *Volume) error
}

// Snapshots are the snapshot records.
type Snapshots interface {
	// CreateSnapshot inserts a snapshot; a name taken in the tenant gives
	// ErrConflict.
	CreateSnapshot(ctx context.Context, sn *Snapshot) error
	GetSnapshot(ctx context.Context, o Owner, id string) (*Snapshot, error)
	// GetSnapshotByName: for AnyOwner a name taken in two tenants is
	// ErrConflict.
	GetSnapshotByName(ctx context.Context, o Owner, name string) (*Snapshot, error)
	// ListSnapshots returns a page of snapshots ordered by creation.
	ListSnapshots(ctx context.Context, f SnapshotFilter, p Page) ([]*Snapshot, string, error)
	DeleteSnapshot(ctx context.Context, id string) error
}

// BuildCache maps a build step's content key to the layer it made, per
// tenant: an entry one tenant's build made never serves another tenant's
// build (a hit would hand over a layer made from the other's files).
// Tenant "" is the host's.
type BuildCache interface {
	GetBuildCache(ctx context.Context, tenant, key string) (string, error)
	PutBuildCache(ctx context.Context, tenant, key, layer string) error
}

// PoolKey names a warm pool: the template of that name tenant owns
// (tenant "" is the host's shared catalogue). A tenant's pool is of its
// own template; the pools of the shared templates are the host's.
type PoolKey struct {
	Tenant   string
	Template string
}

// Pools are the warm-pool sizes per (tenant, template) (a handful: not
// paged).
type Pools interface {
	// SetPool sets the warm-pool size of tenant's template; 0 is kept
	// as a size (none, where the daemon would size one itself).
	SetPool(ctx context.Context, tenant, template string, min int) error
	// ClearPool forgets the size of tenant's template (its template
	// removed, or the daemon's automatic size asked for again).
	ClearPool(ctx context.Context, tenant, template string) error
	// ListPools returns every tenant's pools.
	ListPools(ctx context.Context) (map[PoolKey]int, error)
}

// Flows are the sandboxes' network flow logs.
type Flows interface {
	// AppendFlows records flows and keeps at most keep per sandbox (the
	// oldest go first).
	AppendFlows(ctx context.Context, flows []*Flow, keep int) error
	// ListFlows returns a sandbox's flows with ID > afterID, oldest first
	// (at most limit; 0: 10000). A sandbox o does not see has none.
	ListFlows(ctx context.Context, o Owner, sandboxID string, afterID int64, limit int) ([]*Flow, error)
}

// IDSlots allocates per-sandbox host id ranges.
type IDSlots interface {
	// AllocateIDSlot gives sandboxID the lowest free host-id slot below
	// limit, recorded for node, or the slot it already holds; every slot
	// has at most one holder, also under concurrent allocators. All slots
	// taken gives ErrExhausted.
	AllocateIDSlot(ctx context.Context, sandboxID, node string, limit int) (int, error)
	// ReleaseIDSlot frees sandboxID's slot for reuse; none is not an error.
	ReleaseIDSlot(ctx context.Context, sandboxID string) error
	// ListIDSlots returns the allocated slots by sandbox id (node "" = all).
	ListIDSlots(ctx context.Context, node string) (map[string]int, error)
}

// IdempotencyKeys are the records of Idempotency-Key requests; each key is
// already scoped to its caller.
type IdempotencyKeys interface {
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
}

// APIKeys are the bearer credentials.
type APIKeys interface {
	CreateAPIKey(ctx context.Context, k *APIKey) error
	// GetAPIKeyByHash returns a key, revoked or not; callers check
	// RevokedAt. It is how a caller's owner is found, so it takes none.
	GetAPIKeyByHash(ctx context.Context, hash []byte) (*APIKey, error)
	// ListAPIKeys returns a page of keys ordered by creation.
	ListAPIKeys(ctx context.Context, o Owner, p Page) ([]*APIKey, string, error)
	// GetAPIKey returns o's key id, revoked or not.
	GetAPIKey(ctx context.Context, o Owner, id string) (*APIKey, error)
	// RevokeAPIKey revokes key id and, in the same transaction, every
	// lease it minted.
	RevokeAPIKey(ctx context.Context, id string, at time.Time) error
}

// PurgeRequest is one batch of the retention sweep.
type PurgeRequest struct {
	// Before: what was deleted (tombstones) or recorded (webhook
	// deliveries) before it goes.
	Before time.Time
	// Webhooks are the configured webhook URLs. Events are their outbox:
	// no event above the lowest of their cursors is purged — nor, so, the
	// tombstone it belongs to — and a URL without a cursor holds back
	// every event.
	Webhooks []string
	// Limit bounds each kind of record purged in one call (0: 100).
	Limit int
}

// PurgeResult counts what a batch removed.
type PurgeResult struct {
	Sandboxes, Events, Flows, Volumes, Deliveries int64
}

// Full reports whether some kind filled its limit: more may be due.
func (r PurgeResult) Full(limit int) bool {
	if limit <= 0 {
		limit = 100
	}
	return r.Sandboxes >= int64(limit) || r.Volumes >= int64(limit) || r.Deliveries >= int64(limit)
}

// Retention purges what is kept only for a while.
type Retention interface {
	// Purge removes, in one bounded batch, tombstones of sandboxes deleted
	// before req.Before with their events, flows and those events' webhook
	// deliveries; tombstones of volumes deleted before it; and webhook
	// delivery records older than it. A tombstone with an event a webhook
	// has not handled is kept until it has.
	Purge(ctx context.Context, req PurgeRequest) (PurgeResult, error)
}

// Store is the contract of berth's durable store: every resource's
// interface. All methods are safe for concurrent use.
type Store interface {
	Sandboxes
	Events
	Webhooks
	Templates
	TenantTemplates
	Volumes
	Snapshots
	BuildCache
	Pools
	Flows
	IDSlots
	IdempotencyKeys
	APIKeys
	Tenants
	Retention
	Audit
	Quotas    // quotas.go
	Admission // admission.go
	Secrets
	ReconcileLeases // leader.go
	Processes       // processes.go
	Peers           // peers.go
	Close() error
}
