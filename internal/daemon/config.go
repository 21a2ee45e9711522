// Package daemon wires berth's daemon together: store, layer store,
// runtime, sandbox manager, reconciler and HTTP server. It is what
// `berth serve` runs.
//
// Run takes the data dir's exclusive lock first (lock.go: a flock on
// <data-dir>/daemon.lock held for the daemon's life; a second daemon on the
// same dir is refused naming the holder's pid), makes the daemon a child
// subreaper (internal/reaper), then assembles store, layer store, backend,
// manager and server. Listeners: TLS on --listen (tls.go: the given
// certificate, or a self-signed one made once and kept, so its fingerprint
// stays the same), plain HTTP on --insecure-listen, the unix socket, and the
// E2B door on --e2b-listen (e2b.go), all behind the same connection edge
// and deadlines (docs/api.md, "The edge"). leases.go keeps the store's
// reconcile lease on PostgreSQL; kube.go maps the Kubernetes backend's
// flags. Shutdown is graceful and leaves sandboxes running.
package daemon

import (
	"log/slog"
	"time"

	"github.com/berth-sh/berth/internal/store"
)

// Config is the daemon's whole configuration; flags and environment are
// mapped onto it in one place (cmd/berth).
type Config struct {
	DataDir string // default /var/lib/berth
	Socket  string // unix socket path, default /run/berth/berth.sock
	// Listen is an optional TCP address served over TLS; every request
	// there needs an API key. The certificate is TLSCert/TLSKey, else a
	// self-signed one kept in <DataDir>/tls (its SANs: localhost,
	// 127.0.0.1, ::1, the host name and TLSSANs).
	Listen  string
	TLSCert string
	TLSKey  string
	TLSSANs []string
	// InsecureListen is an optional TCP address served as plain HTTP
	// (loopback and tests; a warning when it is not loopback).
	InsecureListen string
	Store          string // "" or "sqlite" = embedded SQLite in DataDir
	Runtime        string // runtime class: "runc" (default)
	// RuncPath is the runc binary; default "runc" from PATH.
	RuncPath string
	// RunscPath is gVisor's runsc binary; default "runsc" from PATH.
	// When it is installed, statically linked and starts a sandbox here,
	// the daemon offers the "runsc" class beside runc (sandboxes choose it
	// with runtime "runsc"); "none" turns it off.
	RunscPath string
	// MicroVMPath, if set, offers runtime class "kata": a runc-compatible
	// OCI runtime that runs each sandbox in a VM (needs /dev/kvm).
	MicroVMPath string
	// DefaultTemplate is used when a create names none; default "base".
	DefaultTemplate string
	// TenantPulls lets tenants import templates from registries (serve
	// --tenant-pulls); off, they upload archives and pulls are the host's.
	TenantPulls bool
	// ImageCacheSize caps the layers of images pulled on create (serve
	// --image-cache-size); 0: no cap.
	ImageCacheSize int64
	// RegistryAuth is a docker config.json whose "auths" are the
	// registry accounts of every pull and push (serve --registry-auth);
	// "" keeps the daemon user's docker config. Never logged or stored.
	RegistryAuth string
	// RegistryCerts is a directory of per-registry CA certificates in
	// docker's certs.d layout (serve --registry-certs).
	RegistryCerts string
	// RegistryMirror, if set, is the registry Docker Hub's references are
	// pulled from (serve --registry-mirror: host[:port], or http://...).
	RegistryMirror string
	// Backend is where sandboxes run: "local" (default, this machine) or
	// "kubernetes" (pods; Kube configures it).
	Backend string
	Kube    KubeConfig
	// AgentPath is the agent binary (cmd/berth-agent) mounted into
	// sandboxes as their PID 1; default: AgentName beside this executable.
	AgentPath string
	// WebhookURL receives every lifecycle event as a signed JSON POST
	// (X-Berth-Signature: sha256=HMAC-SHA256(WebhookSecret, body)).
	// Domain, if set, makes the port proxy answer {port}-{id}.{Domain}.
	Domain string
	// E2BListen, if set, serves E2B's control and envd APIs (internal/e2b)
	// as plain HTTP on this TCP address (E2BCert/E2BKey: TLS instead);
	// E2BDomain routes hosts {port}-{sandboxID}.{E2BDomain} there.
	E2BListen, E2BDomain string
	E2BCert, E2BKey      string
	// PeerListen, if set, takes requests forwarded by the other daemons
	// of a shared store over mutual TLS (internal/peer) on this TCP
	// address, and makes this daemon forward requests about their
	// sandboxes to them; PeerAdvertise is the address they reach it at
	// (default: PeerListen); PeerCA the peer CA file every daemon of the
	// store is given (default: <data-dir>/peer-ca.pem, made if missing).
	PeerListen, PeerAdvertise, PeerCA string
	// EgressSubnet is the IPv4 subnet of egress sandboxes (CIDR); empty:
	// the one this data dir used before, else the first free one.
	EgressSubnet string
	// EgressCAFile, if set, is a PEM file of CA certificates the egress
	// proxy trusts besides the system roots (a test host's own CA).
	EgressCAFile string
	// EgressDNS are the resolvers (ADDR:PORT) berth's resolver forwards
	// allowed names to; empty: the host's /etc/resolv.conf.
	EgressDNS []string
	// Server-wide policy defaults, under a template's and a request's own.
	DefaultTimeout     time.Duration
	DefaultIdleTimeout time.Duration
	DefaultOnIdle      string // pause | stop
	DefaultMaxAge      time.Duration
	DefaultRetention   time.Duration
	WebhookURL         string
	WebhookSecret      string
	// TokenKeyFile, if set, is the key lease and port tokens are signed
	// with, shared by the replicas of one store (default: lease.key in the
	// data dir, made on first use).
	TokenKeyFile string
	// AuditKeyFile, if set, is the audit key shared by the daemons of one
	// PostgreSQL store (audit.OpenKeyFile); else <DataDir>/audit.key.
	AuditKeyFile string
	// AuditAnchorFile is where the signed head of every audit chain is
	// written (default: beside the data dir, audit.DefaultAnchorPath);
	// AuditAnchorInterval how often (0: a minute). The signing key is
	// <DataDir>/audit-anchor.key.
	AuditAnchorFile     string
	AuditAnchorInterval time.Duration
	// AuditAnchorWebhook, if set, is an http(s) URL every anchor is
	// POSTed to as well.
	AuditAnchorWebhook string
	// Retention is how long tombstones and their events, flows and
	// webhook delivery records are kept (0: for ever).
	Retention time.Duration
	// LeaseTTL is the reconcile leases' lifetime without renewal (package
	// leader): the bound on another replica's takeover when the holder
	// dies, stalls or loses its database. 0: leader.DefaultTTL.
	LeaseTTL time.Duration
	Logger   *slog.Logger

	// DiskDefault caps each sandbox's writable root layer and /tmp when
	// neither request nor template does: 0 means engine.DefaultDiskBytes,
	// negative no cap.
	DiskDefault int64
	// DiskLowWater is the free space creates must leave on the filesystem
	// under the data dir (0: 1 GiB, or 5% of a smaller one).
	DiskLowWater int64
	// PoolSize is the size of the storage pool image when one is made
	// (0: volume.DefaultPoolSize).
	PoolSize int64
	// The HTTP edge of every listener (TCP and the unix socket); zero
	// values take the defaults below.
	//
	// ReadHeaderTimeout bounds the time to send a request's headers (a
	// slowloris client is cut off); IdleTimeout closes keep-alive
	// connections idle that long; BodyTimeout and WriteTimeout bound a
	// request body and its answer on the non-streaming routes (exec
	// streams, the WebSocket PTY, file transfers, builds and the port
	// proxy have no such deadline).
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	BodyTimeout       time.Duration
	WriteTimeout      time.Duration
	// MaxConnsPerClient caps the TCP connections open at once from one
	// client IP; more are closed at accept. 0: the default; negative: no cap.
	MaxConnsPerClient int
	// KeyRate and KeyBurst are each API key's default request rate (per
	// second) and burst; 0: no limit. A tenant's quota key_rate overrides.
	KeyRate  float64
	KeyBurst int
	// DefaultQuota applies to every named tenant without a quota of its
	// own (zero fields: unlimited).
	DefaultQuota store.TenantQuota
	// MaxStarts is how many sandboxes the node starts at once, the rest
	// waiting their turn (0: eight per CPU; -1: no limit); StartQueue how
	// many one tenant may have waiting (0: 1024; -1: no bound).
	MaxStarts, StartQueue int
	// WarmPool, WarmPoolMax and WarmPoolIdle size the default template's
	// automatic warm pool (engine.Config's fields of those names).
	WarmPool, WarmPoolMax int
	WarmPoolIdle          time.Duration
	// SecretsKeyFile holds the secrets master keys (first encrypts, all
	// decrypt); empty: BERTH_SECRETS_KEY, else <DataDir>/secrets.key,
	// generated at first start.
	SecretsKeyFile string
	// MCPMaxSessions and MCPIdleTimeout bound the MCP sessions of /v1/mcp
	// (0: internal/mcp's defaults, 64 and 15 minutes).
	MCPMaxSessions int
	MCPIdleTimeout time.Duration
}

// AgentName is the file name of the agent binary (cmd/berth-agent) that
// the daemon looks for beside its own executable.
const AgentName = "berth-agent"

// Defaults of the HTTP edge.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultBodyTimeout       = time.Minute
	DefaultWriteTimeout      = 10 * time.Minute
	DefaultMaxConnsPerClient = 256
)

// KubeConfig configures the kubernetes backend (serve --backend
// kubernetes; internal/node/kube).
type KubeConfig struct {
	// Kubeconfig is the client's kubeconfig file; "" is the pod's own
	// service account (in-cluster).
	Kubeconfig string
	Namespace  string
	// Instance names this installation in the objects' labels.
	Instance string
	// RuntimeClasses maps berth's runtime classes to RuntimeClasses,
	// "runc=,runsc=gvisor": the default class first.
	RuntimeClasses string
	StorageClass   string
	// SnapshotClass is the VolumeSnapshotClass of forks and snapshots
	// ("" the one for the claims' CSI driver).
	SnapshotClass string
	// CaptureGrace is how old a VolumeSnapshot of a capture no record
	// keeps must be before the sweep removes it (0: the backend's
	// default).
	CaptureGrace time.Duration
	// AgentImage holds the agent binary (berth-agent) at AgentImagePath; Image is the
	// sandboxes' image for templates TemplateImages ("name=image,...")
	// does not name.
	AgentImage, AgentImagePath string
	Image, TemplateImages      string
	PullPolicy                 string
	// NodeName binds every pod to one node (no scheduler).
	NodeName string
	// NodeSelector ("k=v,...") and Tolerations ("key[=value]:Effect,...")
	// place pods on a node pool set aside for sandboxes.
	NodeSelector, Tolerations string
	UserNamespaces            bool
	// ResolverListen is where this replica serves berth's resolver for
	// egress pods ("" none); ResolverAddress is the nameserver egress pods
	// get (the resolver Service's ClusterIP; empty: mode egress is
	// refused); ResolverUpstream the resolvers allowed names are asked of
	// (ADDR:PORT; default this pod's /etc/resolv.conf); ResolverPeers
	// ("NAMESPACE/KEY=VALUE,...") berth's pods, also allowed on the
	// listen port.
	ResolverListen, ResolverAddress string
	ResolverUpstream, ResolverPeers []string
	// NodeAgentPort is where berth's node agents listen on each node
	// (berth kube-node-agent, a DaemonSet): with it the gVisor class
	// (runsc) freezes (pause, quarantine). NodeAgentSecret names the
	// Secret of their identity ("" berth-node-agent).
	NodeAgentPort   int
	NodeAgentSecret string
	// AgentSandbox serves kubernetes-sigs/agent-sandbox's resources as a
	// door (internal/agentsandbox): their CRDs installed and reconciled
	// into sandboxes.
	AgentSandbox bool
}
