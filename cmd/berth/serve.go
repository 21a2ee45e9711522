//go:build !berthcli

package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/internal/daemon"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/server"
	"github.com/berth-sh/berth/templatefile"
)

// webhookSecretEnv supplies --webhook-secret when the flag is not given, so
// the secret need not appear in the process list.
const webhookSecretEnv = "BERTH_WEBHOOK_SECRET"

// storeEnv is --store's default.
const storeEnv = "BERTH_STORE"

func newServeCmd() *cobra.Command { return newServeCmdWith(daemon.Run) }

// newServeCmdWith is newServeCmd with the daemon's entry point replaced
// (tests check the flags' mapping onto daemon.Config with it).
func newServeCmdWith(run func(context.Context, daemon.Config) error) *cobra.Command {
	cfg := daemon.Config{}
	var logLevel, logFormat string
	diskDefault := sizeValue(engine.DefaultDiskBytes)
	var imageCache sizeValue
	var lowWater, poolSize sizeValue
	retention := durationValue(engine.DefaultRecordRetention)
	var rateLimit, defCreateRate, warmPool string
	var defMemory, defStorage sizeValue
	var defCPUs float64
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the berth daemon",
		Long: `Run the berth daemon: the API on a unix socket (and optionally TCP), the
store, the reconciler and the sandboxes' runtime. It stops on SIGINT or SIGTERM;
running sandboxes keep running and are picked up again on the next start.

With --webhook-url, every lifecycle event is POSTed there as JSON, signed with
X-Berth-Signature: sha256=<hex HMAC-SHA256 of the body keyed with the secret>,
and retried with backoff; each delivery is recorded. Delivery is at least once:
an event may be posted again (a crash after the receiver's 2xx, a new leader),
always with the same X-Berth-Delivery-Id, on which receivers deduplicate.

Deleted sandboxes and volumes stay as tombstones, with their events, flows
and webhook delivery records, for --retention (default 7d); then the
reconciler purges them in small batches. An event the webhook has not handled
yet is never purged. --retention 0 keeps them for ever.

Several daemons on one PostgreSQL store (--store postgres://...) elect one
of them, through a lease row in the database, to run the store-wide jobs
(retention, expired idempotency keys, webhook delivery); another takes over
within --lease-ttl when it dies, stalls or loses the database. berth doctor
shows the leases; berth_reconcile_leader is the metric.

--listen ADDR serves the API over TLS (1.2 or later): with --tls-cert and
--tls-key, else with a self-signed ECDSA certificate made at the first start
in <data-dir>/tls and reused afterwards. "TLS fingerprint: sha256:<hex>" is
printed at start (and shown by GET /v1/version); clients pin it with
--tls-fingerprint or BERTH_TLS_FINGERPRINT. Plain HTTP is served only on
--insecure-listen ADDR, meant for loopback.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := newLogger(logLevel, logFormat)
			if err != nil {
				return err
			}
			if err := webhookConfig(&cfg, cmd.Flags().Changed("webhook-secret"), os.Getenv(webhookSecretEnv)); err != nil {
				return err
			}
			if cfg.WebhookURL != "" && cfg.WebhookSecret == "" {
				logger.Warn("webhook deliveries are unsigned: set --webhook-secret or " + webhookSecretEnv)
			}
			cfg.Logger = logger
			cfg.DiskLowWater, cfg.PoolSize = int64(lowWater), int64(poolSize)
			cfg.Retention = time.Duration(retention)
			if cfg.Store == "" {
				// From the environment, so a password in the URL is not
				// in the process's arguments (a Kubernetes Secret's env).
				cfg.Store = os.Getenv(storeEnv)
			}
			cfg.ImageCacheSize = int64(imageCache)
			if cfg.DiskDefault = int64(diskDefault); cfg.DiskDefault == 0 {
				cfg.DiskDefault = -1 // none
			}
			if err := quotaFlags(&cfg, rateLimit, defCreateRate, defCPUs, int64(defMemory), int64(defStorage)); err != nil {
				return err
			}
			wp, err := parseWarmPool(warmPool)
			if err != nil {
				return err
			}
			cfg.WarmPool = wp
			server.Version = version
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if path := os.Getenv(cpuProfileEnv); path != "" {
				end, err := startCPUProfile(path)
				if err != nil {
					return err
				}
				defer end()
			}
			return run(ctx, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "/var/lib/berth", "directory for all of berth's state")
	f.StringVar(&cfg.SecretsKeyFile, "secrets-key-file", "", "file of secrets master keys, one base64 32-byte key a line, mode 0600: the first encrypts, all decrypt (default: $BERTH_SECRETS_KEY, else <data-dir>/secrets.key, generated at first start)")
	f.StringVar(&cfg.Socket, "socket", "/run/berth/berth.sock", "unix socket to serve the API on")
	f.StringVar(&cfg.Listen, "listen", "", "also serve the API over TLS on this TCP `ADDR` (every request needs an API key; the certificate's fingerprint is printed at start)")
	f.StringVar(&cfg.TLSCert, "tls-cert", "", "certificate `FILE` (PEM) of --listen, with --tls-key (default: a self-signed one kept in <data-dir>/tls)")
	f.StringVar(&cfg.TLSKey, "tls-key", "", "private key `FILE` (PEM) of --tls-cert")
	f.StringSliceVar(&cfg.TLSSANs, "tls-san", nil, "extra DNS `NAME` or IP of the self-signed certificate (repeatable; made once, at the first start)")
	f.StringVar(&cfg.InsecureListen, "insecure-listen", "", "also serve the API as plain HTTP on this TCP `ADDR` (loopback and tests; every request needs an API key)")
	f.StringVar(&cfg.Store, "store", "", "store `URL`: empty or sqlite for the embedded SQLite database in the data dir (default $BERTH_STORE)")
	f.StringVar(&cfg.Runtime, "runtime", "runc", "default runtime class for sandboxes that name none: runc or runsc")
	f.StringVar(&cfg.RuncPath, "runc", "runc", "runc binary (`PATH` or name looked up in $PATH)")
	f.StringVar(&cfg.RunscPath, "runsc", "runsc", "gVisor runsc binary (`PATH` or name in $PATH), offered as runtime class runsc when it works here; none: off")
	f.StringVar(&cfg.DefaultTemplate, "default-template", "base", "template used when a create names none")
	f.BoolVar(&cfg.TenantPulls, "tenant-pulls", false, "let tenants' keys import templates from registries (the daemon fetches what they name); off, tenants upload image archives")
	f.Var(&imageCache, "image-cache-size", "cap of the layers images pulled on create (create --image) hold, e.g. 50g; past it the least recently used image records no sandbox uses are removed with the layers nothing else holds (0: no cap)")
	f.StringVar(&cfg.RegistryAuth, "registry-auth", "", "registry credentials `FILE` in docker's config.json format (\"auths\"), used for every pull and push instead of the daemon user's docker config; read at start")
	f.StringVar(&cfg.RegistryMirror, "registry-mirror", "", "pull Docker Hub's images (ubuntu:22.04, docker.io/...) from this registry instead, as docker's registry-mirrors: `HOST[:PORT]`, or http://HOST[:PORT] for plain HTTP")
	f.StringVar(&cfg.RegistryCerts, "registry-certs", "", "`DIR` of per-registry CA certificates, docker's certs.d layout: DIR/<host:port>/*.crt are trusted for that registry besides the system's roots")
	f.StringVar(&cfg.AgentPath, "agent", "", "agent binary (`PATH`) mounted into sandboxes as their PID 1 (default: berth-agent beside this executable)")
	f.StringVar(&cfg.Backend, "backend", "local", "where sandboxes run: local (this machine) or kubernetes (pods in --namespace; docs/kubernetes.md)")
	f.StringVar(&cfg.Kube.Kubeconfig, "kubeconfig", "", "with --backend kubernetes: kubeconfig `FILE` (default: the pod's service account, in-cluster)")
	f.StringVar(&cfg.Kube.Namespace, "namespace", "", "with --backend kubernetes: the `NAMESPACE` of every pod, claim and secret berth makes")
	f.StringVar(&cfg.Kube.Instance, "kube-instance", "berth", "with --backend kubernetes: this installation's `NAME` in the objects' labels (replicas share it)")
	f.StringVar(&cfg.Kube.StorageClass, "storage-class", "", "with --backend kubernetes: StorageClass of volume claims (default: the cluster's)")
	f.StringVar(&cfg.Kube.SnapshotClass, "kube-snapshot-class", "", "with --backend kubernetes: VolumeSnapshotClass of forks and snapshots (default: the one for the claims' CSI driver)")
	f.DurationVar(&cfg.Kube.CaptureGrace, "kube-capture-grace", 0, "with --backend kubernetes: how old the VolumeSnapshots of a fork or snapshot that no record keeps (a replica died between them) must be before the sweep deletes them; longer than any capture takes (default max(10m, 3 × the pod ready timeout))")
	f.StringVar(&cfg.Kube.RuntimeClasses, "runtime-class-map", "", "with --backend kubernetes: berth runtime classes and their RuntimeClasses, `CLASS=RC,...` (RC empty: the cluster's default), the default first (default runc=)")
	f.StringVar(&cfg.Kube.AgentImage, "agent-image", "", "with --backend kubernetes: `IMAGE` holding the berth binary (at --agent-image-path) that an init container copies into each pod")
	f.StringVar(&cfg.Kube.AgentImagePath, "agent-image-path", "/berth-agent", "with --backend kubernetes: `PATH` of the agent binary (berth-agent) in --agent-image")
	f.StringVar(&cfg.Kube.Image, "image", "", "with --backend kubernetes: the sandboxes' container `IMAGE` (their root filesystem) for templates --template-image does not name")
	f.StringVar(&cfg.Kube.TemplateImages, "template-image", "", "with --backend kubernetes: a template's image, `TEMPLATE=IMAGE,...`")
	f.StringVar(&cfg.Kube.PullPolicy, "image-pull-policy", "", "with --backend kubernetes: Always, IfNotPresent or Never (default: Kubernetes')")
	f.StringVar(&cfg.Kube.NodeName, "kube-node", "", "with --backend kubernetes: bind every pod to this `NODE` (a cluster without a scheduler)")
	f.StringVar(&cfg.Kube.NodeSelector, "kube-node-selector", "", "with --backend kubernetes: schedule pods only on nodes with these labels, `KEY=VALUE,...` (a node pool set aside for sandboxes)")
	f.StringVar(&cfg.Kube.Tolerations, "kube-toleration", "", "with --backend kubernetes: tolerate the sandbox pool's taints, `KEY[=VALUE]:EFFECT,...`")
	f.BoolVar(&cfg.Kube.AgentSandbox, "agent-sandbox", false, "with --backend kubernetes: serve kubernetes-sigs/agent-sandbox's Sandbox, SandboxTemplate, SandboxWarmPool and SandboxClaim (v1beta1): install their CRDs and make berth sandboxes of the objects, each acting as the berth API key in its namespace's Secret berth-api-key (docs/kubernetes.md)")
	f.BoolVar(&cfg.Kube.UserNamespaces, "kube-user-namespaces", false, "with --backend kubernetes: run pods with hostUsers: false (nodes that support user namespaces)")
	f.StringVar(&cfg.Kube.ResolverListen, "kube-resolver-listen", "", "with --backend kubernetes: serve berth's DNS resolver for egress pods on this `ADDR` (UDP and TCP, e.g. :5353 behind a Service's port 53)")
	f.IntVar(&cfg.Kube.NodeAgentPort, "kube-node-agent-port", 0, "with --backend kubernetes: the `PORT` berth's node agents listen on at each node's address (berth kube-node-agent, a DaemonSet: deploy/kubernetes/node-agent.yaml); with it the runsc (gVisor) class can pause, resume and quarantine; unset: they are refused")
	f.StringVar(&cfg.Kube.NodeAgentSecret, "kube-node-agent-secret", "", "with --backend kubernetes: the Secret of the node agents' identity, made on first use (default berth-node-agent)")
	f.StringVar(&cfg.Kube.ResolverAddress, "kube-resolver-address", "", "with --backend kubernetes: the `IP` egress pods get as their only nameserver (the resolver Service's ClusterIP); unset: network mode egress is refused")
	f.StringSliceVar(&cfg.Kube.ResolverUpstream, "kube-resolver-upstream", nil, "with --backend kubernetes: resolvers `ADDR:PORT` asked for allowed names (default: this pod's /etc/resolv.conf); repeatable")
	f.StringSliceVar(&cfg.Kube.ResolverPeers, "kube-resolver-peer", nil, "with --backend kubernetes: berth's own pods, `NAMESPACE/KEY=VALUE[,KEY=VALUE]`, also allowed to egress pods on --kube-resolver-listen's port (network plugins that police after a Service's address is translated); repeatable")
	f.StringVar(&cfg.MicroVMPath, "microvm", "", "offer runtime class kata: this runc-compatible microVM OCI runtime `PATH` (e.g. kata-runtime; needs /dev/kvm; untested by berth's CI)")
	f.StringVar(&cfg.EgressSubnet, "egress-subnet", "", "IPv4 `CIDR` of egress sandboxes (default: the one this data dir used, else 100.96.0.0/16 or the first free /16 of 100.64.0.0/10)")
	f.StringVar(&cfg.EgressCAFile, "egress-ca-file", "", "PEM `FILE` of CA certificates the egress proxy (secrets injected at egress) trusts besides the system roots")
	f.StringSliceVar(&cfg.EgressDNS, "egress-dns", nil, "upstream resolvers `ADDR:PORT` of berth's resolver for egress sandboxes (default: the host's /etc/resolv.conf); repeatable")
	f.StringVar(&cfg.Domain, "domain", "", "serve sandbox ports at {port}-{id}.`DOMAIN` (point a wildcard DNS name at the daemon)")
	f.StringVar(&cfg.E2BListen, "e2b-listen", "", "serve E2B's control and envd APIs for the unmodified E2B SDKs on this TCP `ADDR` (plain HTTP unless --e2b-cert; docs/e2b.md)")
	f.StringVar(&cfg.E2BDomain, "e2b-domain", "", "route hosts {port}-{sandboxID}.`DOMAIN` on --e2b-listen to that sandbox (E2B_DOMAIN)")
	f.StringVar(&cfg.E2BCert, "e2b-cert", "", "TLS certificate `FILE` of --e2b-listen (with --e2b-key)")
	f.StringVar(&cfg.E2BKey, "e2b-key", "", "TLS key `FILE` of --e2b-listen")
	f.StringVar(&cfg.PeerListen, "peer-listen", "", "with a shared store: take requests the other daemons forward (mutual TLS) on this TCP `ADDR`, and forward theirs to them (docs/lifecycle.md)")
	f.StringVar(&cfg.PeerAdvertise, "peer-advertise", "", "the `HOST:PORT` the other daemons reach --peer-listen at (default: --peer-listen)")
	f.StringVar(&cfg.PeerCA, "peer-ca", "", "peer CA `FILE` (certificate and key) shared by every daemon of the store (default: <data-dir>/peer-ca.pem, made if missing)")
	f.DurationVar(&cfg.DefaultTimeout, "default-timeout", 0, "server-wide default hard timeout of sandboxes (0: none)")
	f.DurationVar(&cfg.DefaultIdleTimeout, "default-idle-timeout", 0, "server-wide default idle timeout (0: none)")
	f.StringVar(&cfg.DefaultOnIdle, "default-on-idle", "", "server-wide default idle action: pause or stop")
	f.DurationVar(&cfg.DefaultMaxAge, "default-max-age", 0, "server-wide default maximum age (0: none)")
	f.DurationVar(&cfg.DefaultRetention, "default-retention", 0, "server-wide default retention of stopped sandboxes (0: kept)")
	f.Var(&lowWater, "disk-low-water", "free space creates must leave on the filesystem under the data dir, else 507 (default 1 GiB, or 5% of a smaller filesystem)")
	f.Var(&poolSize, "pool-size", "size of the storage pool image when berth makes one (sparse; default 256 GiB)")
	f.Var(&diskDefault, "disk-default", "server-wide default cap of each sandbox's writable root layer and /tmp, under a template's and a request's own (0: none)")
	f.DurationVar(&cfg.LeaseTTL, "lease-ttl", 0, "lifetime of a reconcile lease without renewal, the bound on a takeover by another replica on a shared store (default 15s)")
	f.Var(&retention, "retention", "purge tombstones of deleted sandboxes and volumes, with their events, flows and webhook delivery records, this long after deletion (e.g. 7d, 36h; 0: keep for ever; never an event the webhook has not handled)")
	f.StringVar(&cfg.WebhookURL, "webhook-url", "", "POST every lifecycle event as JSON to this http(s) `URL`, signed in X-Berth-Signature")
	f.StringVar(&cfg.WebhookSecret, "webhook-secret", "", "HMAC-SHA256 key of the webhook signature (env "+webhookSecretEnv+")")
	f.StringVar(&cfg.TokenKeyFile, "token-key-file", "", "signing key `FILE` (>= 32 bytes, mode 0600) of lease and port tokens, shared by the replicas of one PostgreSQL store so each accepts the others' tokens (default <data-dir>/lease.key, made on first use)")
	f.StringVar(&cfg.AuditAnchorFile, "audit-anchor-file", "", "where the signed heads of the audit chains are written (default <data-dir>.audit-anchor.json, beside the data dir); check with berth audit verify --anchor")
	f.DurationVar(&cfg.AuditAnchorInterval, "audit-anchor-interval", time.Minute, "how often the audit anchor is signed and written")
	f.StringVar(&cfg.AuditAnchorWebhook, "audit-anchor-webhook", "", "an http(s) URL each audit anchor is also POSTed to (JSON, signed with the anchor key), for a copy off this machine")
	f.StringVar(&cfg.AuditKeyFile, "audit-key-file", "", "audit seal key (>= 32 bytes, mode 0600) shared by the daemons of one PostgreSQL store (default <data-dir>/audit.key, made on first use)")
	f.DurationVar(&cfg.ReadHeaderTimeout, "http-read-header-timeout", daemon.DefaultReadHeaderTimeout, "time a client has to send a request's headers (slower clients are cut off)")
	f.DurationVar(&cfg.IdleTimeout, "http-idle-timeout", daemon.DefaultIdleTimeout, "close keep-alive API connections idle this long")
	f.DurationVar(&cfg.BodyTimeout, "http-body-timeout", daemon.DefaultBodyTimeout, "time to send a request body on non-streaming routes, and the longest pause in an upload's body (template archives, file tars)")
	f.IntVar(&cfg.MCPMaxSessions, "mcp-max-sessions", 64, "MCP sessions /v1/mcp holds at once")
	f.DurationVar(&cfg.MCPIdleTimeout, "mcp-idle-timeout", 15*time.Minute, "close an MCP session of /v1/mcp idle this long (its ephemeral sandboxes are deleted)")
	f.DurationVar(&cfg.WriteTimeout, "http-write-timeout", daemon.DefaultWriteTimeout, "time to answer a request on non-streaming routes (exec, files, builds and the port proxy are not bounded)")
	f.IntVar(&cfg.MaxStarts, "max-starts", 0, "sandboxes started at once (creates, forks, restores, pool refills); the rest wait their turn, fairly between tenants (0: eight per CPU; -1: no limit)")
	f.StringVar(&warmPool, "warm-pool", "auto", "the default template's warm pool while none is set for it (berth template pool): auto (sized from recent demand: the most creates of any 10 s), off, or a fixed size N")
	f.IntVar(&cfg.WarmPoolMax, "warm-pool-max", 0, "most members of the automatic warm pool (0: as many as 1/16 of the host's memory holds at 8 MiB each, at most 256)")
	f.DurationVar(&cfg.WarmPoolIdle, "warm-pool-idle", 0, "how long the automatic warm pool keeps its size after the demand that set it (0: 10m)")
	f.IntVar(&cfg.StartQueue, "start-queue", 0, "starts one tenant may have waiting before its next create is refused with 429 limit_exceeded (0: 1024; -1: no bound)")
	f.IntVar(&cfg.MaxConnsPerClient, "max-conns-per-client", daemon.DefaultMaxConnsPerClient, "TCP connections one client IP may hold open; at the cap a new one replaces the oldest that has not authenticated, else it is closed at accept (-1: no cap)")
	f.StringVar(&rateLimit, "rate-limit", "", "default request rate of each API key, N/s or N/s,BURST (default: none; a tenant's quota key rate overrides)")
	f.Int64Var(&cfg.DefaultQuota.MaxSandboxes, "default-quota-sandboxes", 0, "live sandboxes at once of each tenant without a quota of its own (0: unlimited)")
	f.Float64Var(&defCPUs, "default-quota-cpus", 0, "CPUs of each tenant without a quota of its own (0: unlimited)")
	f.Var(&defMemory, "default-quota-memory", "memory of each tenant without a quota of its own (0: unlimited)")
	f.Var(&defStorage, "default-quota-storage", "storage (disk caps, volume sizes, own template layers) of each tenant without a quota of its own (0: unlimited)")
	f.StringVar(&defCreateRate, "default-quota-create-rate", "", "creates a minute of each tenant without a quota of its own, N/m or N/m,BURST")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "log format on stderr: text or json")
	return cmd
}

// webhookConfig checks the webhook settings and fills the secret from the
// environment when the flag was not given.
func webhookConfig(cfg *daemon.Config, secretFlagSet bool, envSecret string) error {
	if !secretFlagSet {
		cfg.WebhookSecret = envSecret
	}
	if cfg.WebhookURL == "" {
		if secretFlagSet {
			return fmt.Errorf("--webhook-secret needs --webhook-url")
		}
		return nil
	}
	u, err := url.Parse(cfg.WebhookURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("invalid --webhook-url %q: want http(s)://host[:port]/path", cfg.WebhookURL)
	}
	return nil
}

func newLogger(level, format string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("invalid --log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("invalid --log-format %q: want text or json", format)
}

// parseWarmPool is --warm-pool: auto (0), off (-1) or a size.
func parseWarmPool(v string) (int, error) {
	switch v {
	case "auto", "":
		return 0, nil
	case "off":
		return -1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > templatefile.MaxPoolMin {
		return 0, fmt.Errorf("--warm-pool %q: want auto, off or a size from 0 to %d", v, templatefile.MaxPoolMin)
	}
	if n == 0 {
		return -1, nil
	}
	return n, nil
}

// quotaFlags maps --rate-limit and --default-quota-* onto cfg.
func quotaFlags(cfg *daemon.Config, rateLimit, createRate string, cpus float64, memory, storage int64) error {
	if rateLimit != "" {
		n, per, b, err := parseRate(rateLimit)
		if err != nil {
			return fmt.Errorf("--rate-limit: %w", err)
		}
		if n != 0 && per != time.Second {
			return fmt.Errorf("--rate-limit %q: give it a second, N/s", rateLimit)
		}
		cfg.KeyRate, cfg.KeyBurst = float64(n), int(max(b, 1, n))
		if b > 0 {
			cfg.KeyBurst = int(b)
		}
	}
	if createRate != "" {
		n, per, b, err := parseRate(createRate)
		if err != nil {
			return fmt.Errorf("--default-quota-create-rate: %w", err)
		}
		if n != 0 && per != time.Minute {
			return fmt.Errorf("--default-quota-create-rate %q: give it a minute, N/m", createRate)
		}
		cfg.DefaultQuota.CreateRate, cfg.DefaultQuota.CreateBurst = n, b
	}
	if cpus < 0 || cpus > 1<<40 || cfg.DefaultQuota.MaxSandboxes < 0 {
		return fmt.Errorf("--default-quota-cpus and --default-quota-sandboxes must not be negative")
	}
	cfg.DefaultQuota.MaxCPUMillis = int64(cpus * 1000)
	cfg.DefaultQuota.MaxMemory, cfg.DefaultQuota.MaxStorage = memory, storage
	return nil
}
