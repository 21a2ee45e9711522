package daemon

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/e2b"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/templates"
	"github.com/berth-sh/berth/internal/image"
	"github.com/berth-sh/berth/internal/leader"
	"github.com/berth-sh/berth/internal/metrics"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/node/local"
	"github.com/berth-sh/berth/internal/reaper"
	"github.com/berth-sh/berth/internal/runtime"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/postgres"
	"github.com/berth-sh/berth/internal/store/sqlite"
	"github.com/berth-sh/berth/internal/webhook"
)

// Defaults for Config fields left empty.
const (
	DefaultDataDir = "/var/lib/berth"
	DefaultSocket  = "/run/berth/berth.sock"
)

// Daemon is a running berth daemon.
type Daemon struct {
	cfg     Config
	Store   store.Store
	engine  *engineSet // the engine and its features (engine.go)
	Server  *server.Server
	images  *image.Store
	runsc   *runtime.Runsc // the gVisor class, when available (runscMu)
	runscMu sync.Mutex
	// runscRetry, called at Close, stops retryRunsc; runscDone is closed
	// when it has returned. Nil: no retry runs.
	runscRetry    context.CancelFunc
	runscDone     chan struct{}
	runscRetryCfg *Config
	backend       node.Backend
	webhook       *webhook.Deliverer
	anchor        *audit.Anchorer // signs the audit chains' heads out of the database
	leases        *leases         // leases.go
	servers       []*http.Server
	lns           []net.Listener
	tls           *tls.Config // of the --listen listener
	lock          *os.File    // the data dir's flock (lock.go), held for the daemon's life
	// TLSFingerprint is the pin of the --listen certificate (empty
	// without --listen).
	TLSFingerprint string
	e2b            *e2b.Door // the --e2b-listen door (e2b.go)
	authn          *auth.Authenticator
}

func (c *Config) setDefaults() error {
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = leader.DefaultTTL
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.Socket == "" {
		c.Socket = DefaultSocket
	}
	if c.Runtime == "" {
		c.Runtime = "runc"
	}
	if c.DefaultTemplate == "" {
		c.DefaultTemplate = templates.BuiltinTemplate
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&c.ReadHeaderTimeout, DefaultReadHeaderTimeout}, {&c.IdleTimeout, DefaultIdleTimeout},
		{&c.BodyTimeout, DefaultBodyTimeout}, {&c.WriteTimeout, DefaultWriteTimeout}} {
		if *d.v < 0 {
			return fmt.Errorf("HTTP timeouts must not be negative, got %s", *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.MaxConnsPerClient == 0 {
		c.MaxConnsPerClient = DefaultMaxConnsPerClient
	}
	if c.Backend != "" && c.Backend != "local" {
		// Pods take their agent from --agent-image.
	} else if c.AgentPath == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		if exe, err = filepath.EvalSymlinks(exe); err != nil {
			return err
		}
		c.AgentPath = filepath.Join(filepath.Dir(exe), AgentName)
	}
	// Found now, not at the first create: a daemon without its agent can
	// start no sandbox, and says so before it serves.
	if c.AgentPath != "" {
		if st, err := os.Stat(c.AgentPath); err != nil {
			return fmt.Errorf("the sandbox agent: %w (make build puts %s beside berth; serve --agent names another)", err, AgentName)
		} else if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
			return fmt.Errorf("the sandbox agent %s is not an executable file", c.AgentPath)
		}
	}
	abs, err := filepath.Abs(c.DataDir)
	if err != nil {
		return err
	}
	c.DataDir = abs
	return nil
}

// Open builds a daemon: store, layer store, runtime and manager, then
// reconciles with the host. It does not listen yet; see Serve.
func Open(ctx context.Context, cfg Config) (*Daemon, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if err := os.MkdirAll(cfg.DataDir, 0o711); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	var st store.Store
	switch {
	case cfg.Store == "" || cfg.Store == "sqlite":
		st, err = sqlite.Open(ctx, filepath.Join(cfg.DataDir, "berth.db"))
	case strings.HasPrefix(cfg.Store, "postgres://") || strings.HasPrefix(cfg.Store, "postgresql://"):
		st, err = postgres.Open(ctx, cfg.Store)
	default:
		return nil, fmt.Errorf("unsupported --store %q: use sqlite or a postgres:// URL", cfg.Store)
	}
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("opening store: %w", err)
	}
	d := &Daemon{cfg: cfg, Store: st, lock: lock}
	if n, err := hostPidMax(); err == nil {
		sandbox.SetHostPidMax(n)
	} else {
		log.Warn("cannot read kernel.pid_max; pids limits are checked against berth's own maximum", "err", err)
	}
	ok := false
	defer func() {
		if !ok {
			d.Close()
		}
	}()
	// First, before anything else is opened: a keyring that cannot open
	// the stored secrets refuses the start (checkSecretKeys).
	secretsCfg, err := openSecrets(ctx, cfg, st, log)
	if err != nil {
		return nil, err
	}
	idmap := local.DefaultIDMap
	imageOpts := []image.Option{image.WithLogger(log.With("component", "image"))}
	if cfg.RegistryAuth != "" {
		creds, err := image.LoadCredentials(cfg.RegistryAuth)
		if err != nil {
			return nil, fmt.Errorf("--registry-auth %s: %w", cfg.RegistryAuth, err)
		}
		// The hosts only: the secrets are never logged.
		log.Info("registry credentials", "file", cfg.RegistryAuth, "registries", creds.Hosts())
		imageOpts = append(imageOpts, image.WithKeychain(creds))
	}
	if cfg.RegistryMirror != "" {
		host, plain, err := image.ParseMirror(cfg.RegistryMirror)
		if err != nil {
			return nil, fmt.Errorf("--registry-mirror: %w", err)
		}
		imageOpts = append(imageOpts, image.WithHubMirror(host, plain))
	}
	if cfg.RegistryCerts != "" {
		if st, err := os.Stat(cfg.RegistryCerts); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("--registry-certs %s: not a directory", cfg.RegistryCerts)
		}
		imageOpts = append(imageOpts, image.WithRegistryCerts(cfg.RegistryCerts))
	}
	d.images, err = image.Open(filepath.Join(cfg.DataDir, "images"),
		image.IDMap{HostUID: idmap.HostUID, HostGID: idmap.HostGID, Size: idmap.Size}, imageOpts...)
	if err != nil {
		return nil, fmt.Errorf("opening layer store: %w", err)
	}
	var rts []runtime.Runtime
	if cfg.Kube.AgentSandbox && cfg.Backend != "kubernetes" {
		return nil, fmt.Errorf("--agent-sandbox needs --backend kubernetes")
	}
	if cfg.Backend == "" || cfg.Backend == "local" {
		if rts, err = d.openRuntimes(ctx, &cfg); err != nil {
			return nil, err
		}
	}
	var egressSubnet netip.Prefix
	if cfg.EgressSubnet != "" {
		p, err := netip.ParsePrefix(cfg.EgressSubnet)
		if err != nil || !p.Addr().Is4() || p.Bits() < 8 || p.Bits() > 29 {
			return nil, fmt.Errorf("--egress-subnet %q: want an IPv4 prefix between /8 and /29, e.g. 100.97.0.0/16", cfg.EgressSubnet)
		}
		egressSubnet = p.Masked()
	}
	egressRoots, egressDNS, err := egressProxyConfig(&cfg)
	if err != nil {
		return nil, err
	}
	diskDefault := cfg.DiskDefault
	if diskDefault == 0 {
		diskDefault = engine.DefaultDiskBytes
	}
	var backend node.Backend
	var lb *local.Backend
	met := metrics.New()
	switch cfg.Backend {
	case "", "local":
		lb, err = local.New(local.Config{
			DataDir: cfg.DataDir, AgentPath: cfg.AgentPath, IDMap: idmap,
			Instance: local.InstanceName(cfg.DataDir), Logger: log.With("component", "node"),
			PoolSize: cfg.PoolSize, EgressSubnet: egressSubnet, DiskDefault: diskDefault,
			DiskLowWater: cfg.DiskLowWater, Runtimes: rts, Images: d.images,
			EgressRoots: egressRoots, EgressUpstream: egressDNS, Step: met.ProvisionStep,
		})
		backend = lb
		if err == nil && d.runscRetryCfg != nil {
			var rctx context.Context
			rctx, d.runscRetry = context.WithCancel(context.WithoutCancel(ctx))
			d.runscDone = make(chan struct{})
			go func() {
				defer close(d.runscDone)
				d.retryRunsc(rctx, d.runscRetryCfg, lb)
			}()
		}
	case "kubernetes":
		backend, err = openKube(ctx, cfg.Kube, log.With("component", "node"))
	default:
		err = fmt.Errorf("unknown --backend %q: local or kubernetes", cfg.Backend)
	}
	if err != nil {
		return nil, err
	}
	d.backend = backend
	mcfg := engine.Config{
		DefaultTemplate: cfg.DefaultTemplate,
		UploadDir:       filepath.Join(cfg.DataDir, "uploads"),
		Logger:          log.With("component", "manager"),
		DefaultTimeout:  cfg.DefaultTimeout, DiskDefault: cfg.DiskDefault,
		DefaultPolicy: sandbox.Policy{IdleTimeout: cfg.DefaultIdleTimeout, OnIdle: sandbox.Action(cfg.DefaultOnIdle),
			MaxAge: cfg.DefaultMaxAge, Retention: cfg.DefaultRetention},
		Retention: cfg.Retention, DefaultQuota: cfg.DefaultQuota,
		MaxStarts: cfg.MaxStarts, StartQueue: cfg.StartQueue,
		WarmPool: cfg.WarmPool, WarmPoolMax: cfg.WarmPoolMax, WarmPoolIdle: cfg.WarmPoolIdle,
	}
	mcfg.TenantPulls = cfg.TenantPulls
	mcfg.ImageCacheSize = cfg.ImageCacheSize
	if mcfg.Node == "" {
		mcfg.Node = local.InstanceName(cfg.DataDir)
		if cfg.Backend == "kubernetes" {
			// Every replica of one installation acts on its pods.
			mcfg.Node = kubeNodeName(cfg.Kube)
		}
	}
	// One registry for the engine's measures and the API's (/metrics).
	mcfg.Metrics = met
	// The local backend's node is this daemon's alone; a PostgreSQL store
	// may be shared, so its store-wide jobs run on one daemon of them.
	sharedStore := cfg.Store != "" && cfg.Store != "sqlite"
	// The local backend's node is its daemon's alone; a Kubernetes one is
	// named alike by every replica of an installation on one store, so
	// one replica at a time reconciles it.
	sharedNode := cfg.Backend == "kubernetes" && sharedStore
	d.leases = openLeases(st, mcfg.Node, sharedStore, sharedNode, cfg.LeaseTTL, log.With("component", "leader"))
	mcfg.NodeLease, mcfg.StoreLease = d.leases.node, d.leases.store
	if sharedNode {
		mcfg.Replica = d.leases.self
		if err := leader.WaitHeld(ctx, d.leases.presence, cfg.LeaseTTL); err != nil {
			return nil, fmt.Errorf("taking this replica's presence lease: %w", err)
		}
	}
	met.WatchLeases(d.leases.held)
	if err := (&sandbox.Spec{Resources: sandbox.DefaultResources, Policy: mcfg.DefaultPolicy}).Validate(); err != nil {
		return nil, fmt.Errorf("default policy: %w", err)
	}
	if cfg.WebhookURL != "" {
		d.webhook = webhook.New(webhook.Config{URL: cfg.WebhookURL, Secret: cfg.WebhookSecret,
			Logger: log.With("component", "webhook"), OnDelivery: met.WebhookDelivery, Encode: server.EventJSON,
			Leads: func() bool { _, ok := d.leases.store.Held(); return ok }}, st)
		mcfg.OnEvent = d.webhook.Kick
		mcfg.Webhooks = []string{cfg.WebhookURL}
	}
	mcfg.OnState = server.LeaseRevoker(st, log.With("component", "leases"))
	var auditKey []byte
	if cfg.AuditKeyFile != "" {
		auditKey, err = audit.OpenKeyFile(cfg.AuditKeyFile)
	} else {
		auditKey, err = audit.OpenKey(cfg.DataDir)
	}
	if err != nil {
		return nil, err
	}
	auditLog := audit.New(st, auditKey, log.With("component", "audit"))
	mcfg.Audit = auditLog.System
	d.engine, err = assembleEngine(mcfg, st, d.images, backend)
	if err != nil {
		return nil, err
	}
	met.Watch(d.engine.MetricsSnapshot, 5*time.Second)
	if err := d.engine.EnsureBuiltin(ctx); err != nil {
		return nil, err
	}
	if created, err := auth.Bootstrap(ctx, st, cfg.DataDir, time.Now().UTC()); err != nil {
		return nil, err
	} else if created {
		log.Info("created the bootstrap admin API key", "file", filepath.Join(cfg.DataDir, auth.AdminKeyFile))
	}
	// Before recovery: the sandboxes it starts again (a persistent one
	// after a host reboot) get their secrets, as env of their services
	// and supervised processes, as files and at the egress proxy.
	d.engine.SetSecrets(secretsCfg.Vault)
	if lb != nil {
		lb.SetEgressSecrets(egressSecrets(secretsCfg.Vault, auditLog))
	}
	if err := d.engine.Recover(ctx); err != nil {
		return nil, fmt.Errorf("reconciling: %w", err)
	}
	var leases *auth.Leases
	if cfg.TokenKeyFile != "" {
		leases, err = auth.OpenLeasesFile(cfg.TokenKeyFile)
	} else {
		leases, err = auth.OpenLeases(cfg.DataDir)
	}
	if err != nil {
		return nil, err
	}
	d.authn = auth.New(st, leases)
	d.Server = server.New(d.engine, d.authn, log.With("component", "api"))
	d.Server.Leases = leases
	d.Server.Audit = auditLog
	anchorKey, err := audit.OpenAnchorKey(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	d.Server.AuditAnchorKey = anchorKey.Public().(ed25519.PublicKey)
	anchorPath := cfg.AuditAnchorFile
	if anchorPath == "" {
		anchorPath = audit.DefaultAnchorPath(cfg.DataDir)
	}
	d.anchor = audit.NewAnchorer(st, anchorKey, anchorPath, log.With("component", "audit-anchor"))
	if cfg.AuditAnchorWebhook != "" {
		if err := d.anchor.PostTo(cfg.AuditAnchorWebhook, nil); err != nil {
			return nil, err
		}
	}
	d.Server.Domain = strings.ToLower(strings.TrimSuffix(cfg.Domain, "."))
	d.Server.BodyTimeout, d.Server.WriteTimeout = cfg.BodyTimeout, cfg.WriteTimeout
	d.Server.MCPMaxSessions, d.Server.MCPIdleTimeout = cfg.MCPMaxSessions, cfg.MCPIdleTimeout
	d.Server.MaxHeaderBytes = server.DefaultMaxHeaderBytes
	d.Server.KeyRate = server.KeyRate{Rate: cfg.KeyRate, Burst: cfg.KeyBurst}
	if cfg.Listen != "" {
		cert, err := loadTLS(&cfg)
		if err != nil {
			return nil, err
		}
		d.tls = tlsConfig(cert)
		d.TLSFingerprint = Fingerprint(cert.Certificate[0])
		d.Server.TLSFingerprint = d.TLSFingerprint
	}
	d.Server.Secrets = secretsCfg
	if d.webhook != nil {
		d.Server.Webhooks = []server.WebhookSource{d.webhook}
	}
	ok = true
	return d, nil
}

// consoleBase is the base URL of the web console on listener address a:
// an unspecified address (0.0.0.0, ::) is shown as localhost, the one
// name certain to reach it from the host that runs `berth console`.
func consoleBase(scheme string, a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return scheme + "://" + a.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// openRuntimes opens the local backend's runtime classes: runc, runsc
// when it works here, a microVM runtime when configured; the default
// first.
func (d *Daemon) openRuntimes(ctx context.Context, cfg *Config) ([]runtime.Runtime, error) {
	log := cfg.Logger
	runc, err := runtime.NewRunc(cfg.RuncPath, filepath.Join(cfg.DataDir, "runc"))
	if err != nil {
		return nil, err
	}
	rts := []runtime.Runtime{runc}
	rs, why, retry := openRunsc(ctx, cfg, log)
	if rs != nil {
		d.runsc = rs
		rts = append(rts, rs)
	} else {
		log.Info("runtime class runsc unavailable; sandboxes run on runc only", "reason", why, "retried", retry)
		if retry && cfg.Runtime != "runsc" {
			d.runscRetryCfg = cfg
		}
	}
	if cfg.MicroVMPath != "" {
		vm, err := runtime.NewMicroVM("kata", cfg.MicroVMPath, filepath.Join(cfg.DataDir, "microvm"))
		if err != nil {
			return nil, fmt.Errorf("--microvm: %w", err)
		}
		rts = append(rts, vm)
		log.Warn("runtime class kata (microVM) enabled: not covered by berth's test suite on this host kind", "binary", cfg.MicroVMPath)
	}
	switch cfg.Runtime {
	case "runc":
	case "runsc":
		if rs == nil {
			return nil, fmt.Errorf("--runtime runsc: %s", why)
		}
		rts[0], rts[1] = rts[1], rts[0] // the default class comes first
	default:
		return nil, fmt.Errorf("unknown runtime %q: this build supports runc and runsc", cfg.Runtime)
	}
	return rts, nil
}

// Serve listens on the unix socket (and TCP address, if configured) and
// serves until ctx is cancelled, then shuts down gracefully. Sandboxes keep
// running.
func (d *Daemon) Serve(ctx context.Context) error {
	log := d.cfg.Logger
	// TCP first: once the socket answers, clients may rely on every listener.
	if d.cfg.Listen != "" {
		tl, err := net.Listen("tcp", d.cfg.Listen)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", d.cfg.Listen, err)
		}
		// TLS under the edge: the connection cap counts TCP connections
		// at accept (the handshake is lazy, under the header deadline),
		// and the rewrite of net/http's own answers sees plaintext.
		d.Server.ConsoleURLs = append(d.Server.ConsoleURLs, consoleBase("https", tl.Addr()))
		d.addServer(tls.NewListener(tl, d.tls), false)
		log.Info("listening", "tls", tl.Addr().String(), "fingerprint", d.TLSFingerprint)
		fmt.Fprintf(os.Stderr, "TLS fingerprint: %s\n", d.TLSFingerprint)
	}
	if d.cfg.InsecureListen != "" {
		pl, err := net.Listen("tcp", d.cfg.InsecureListen)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", d.cfg.InsecureListen, err)
		}
		d.Server.ConsoleURLs = append(d.Server.ConsoleURLs, consoleBase("http", pl.Addr()))
		d.addServer(pl, false)
		if isLoopback(d.cfg.InsecureListen) {
			log.Info("listening", "http", pl.Addr().String())
		} else {
			log.Warn("serving plain HTTP on a non-loopback address: API keys cross the network in clear", "http", pl.Addr().String())
		}
	}
	if d.cfg.E2BListen != "" {
		if err := d.listenE2B(); err != nil {
			return err
		}
	}
	if d.cfg.PeerListen != "" {
		if err := d.listenPeer(); err != nil {
			return err
		}
	}
	if d.cfg.Kube.AgentSandbox {
		stop, err := d.startAgentSandbox(ctx, d.authn, log.With("component", "agent-sandbox"))
		if err != nil {
			return err
		}
		defer stop()
	}
	if err := os.MkdirAll(filepath.Dir(d.cfg.Socket), 0o755); err != nil {
		return err
	}
	if err := removeStaleSocket(d.cfg.Socket); err != nil {
		return err
	}
	ul, err := net.Listen("unix", d.cfg.Socket)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", d.cfg.Socket, err)
	}
	// Root only: the socket is the administrator's door.
	if err := os.Chmod(d.cfg.Socket, 0o600); err != nil {
		ul.Close()
		return err
	}
	d.addServer(ul, true)
	log.Info("berth daemon ready", "socket", d.cfg.Socket, "data_dir", d.cfg.DataDir, "runtime", d.engine.DefaultRuntime(),
		"runtimes", strings.Join(d.engine.RuntimeNames(), ","))
	if d.webhook != nil {
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { d.webhook.Run(wctx); close(done) }()
		defer func() { cancel(); <-done }()
	}
	if d.anchor != nil {
		// The audit chains' heads, signed, out of the database: what
		// `berth audit verify --anchor` checks a rewind against.
		actx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		every := d.cfg.AuditAnchorInterval
		if every <= 0 {
			every = time.Minute
		}
		go func() { d.anchor.Run(actx, every); close(done) }()
		defer func() { cancel(); <-done }()
	}
	errc := make(chan error, len(d.servers))
	for i, srv := range d.servers {
		go func() { errc <- srv.Serve(d.lns[i]) }()
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			log.Error("server failed", "err", err)
		}
	}
	log.Info("shutting down; sandboxes keep running")
	d.Server.CloseMCP()     // MCP sessions end: their ephemeral sandboxes go
	d.Server.CloseStreams() // event streams end; their clients resume elsewhere
	if d.e2b != nil {
		d.e2b.Close()
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, srv := range d.servers {
		_ = srv.Shutdown(sctx)
	}
	return nil
}

// Addr returns the TCP address the daemon listens on, if any: the TLS
// one (--listen) when there is one, else the plain one.
func (d *Daemon) Addr() string {
	for _, l := range d.lns {
		if l.Addr().Network() == "tcp" {
			return l.Addr().String()
		}
	}
	return ""
}

// addServer serves l: the connection cap (TCP only: on the unix socket
// every caller is root) and the JSON rewrite of net/http's own errors
// (server.Listener), the header, idle and per-request deadlines.
// ReadTimeout and WriteTimeout stay 0: they would cut exec streams, the
// WebSocket PTY and file transfers; the server sets deadlines per request
// on the other routes instead (Server.BodyTimeout, Server.WriteTimeout).
func (d *Daemon) addServer(l net.Listener, trusted bool) {
	max := d.cfg.MaxConnsPerClient
	if trusted || max < 0 {
		max = 0
	}
	d.lns = append(d.lns, d.Server.Listener(l, max))
	d.servers = append(d.servers, &http.Server{
		Handler:           d.Server.Handler(trusted),
		ReadHeaderTimeout: d.cfg.ReadHeaderTimeout,
		ConnContext:       server.ConnContext,
		IdleTimeout:       d.cfg.IdleTimeout,
		MaxHeaderBytes:    server.DefaultMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(d.cfg.Logger.Handler(), slog.LevelWarn),
	})
}

// hostPidMax reads kernel.pid_max.
func hostPidMax() (int64, error) {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// Close stops background work and closes the store. Sandboxes keep running.
func (d *Daemon) Close() {
	if d.runscRetry != nil {
		d.runscRetry()
		<-d.runscDone
	}
	if d.engine != nil {
		d.engine.Close() // closes the backend too
	} else if d.backend != nil {
		d.backend.Close(true)
	}
	if d.leases != nil {
		d.leases.close() // after the reconciler stopped: hands over at once
	}
	d.runscMu.Lock()
	defer d.runscMu.Unlock()
	if d.runsc != nil {
		// runsc's shared null-netns mount; running sandboxes keep theirs.
		if err := d.runsc.Close(); err != nil {
			d.cfg.Logger.Warn("closing runsc", "err", err)
		}
	}
	if d.images != nil {
		d.images.Close()
	}
	if d.Store != nil {
		d.Store.Close()
	}
	if d.lock != nil {
		d.lock.Close() // last: the next daemon may take over from here
	}
}

// removeStaleSocket removes a socket file left by a daemon that is gone,
// and refuses to start beside one that still answers.
func removeStaleSocket(path string) error {
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("another daemon is serving %s", path)
	}
	return os.Remove(path)
}

// Run starts the daemon and blocks until ctx is cancelled (graceful
// shutdown: running sandboxes keep running).
func Run(ctx context.Context, cfg Config) error {
	// The runtimes leave container inits and gVisor's processes to the
	// daemon; the reaper reaps them when they end.
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if r, err := reaper.Start(log.With("component", "reaper")); err != nil {
		log.Warn("processes the runtimes leave are not reaped by the daemon", "err", err)
	} else {
		defer r.Close()
	}
	d, err := Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Serve(ctx)
}
