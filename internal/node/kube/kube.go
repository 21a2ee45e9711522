// Package kube is berth's node backend on Kubernetes, the second
// implementation of node.Backend: a sandbox is a Pod in one namespace,
// labelled with its id, whose init container copies the berth binary into
// an emptyDir and whose one container runs it as the agent (PID 1),
// listening on TCP under mutual TLS with a key pair of that sandbox alone
// (a Secret mounted only into its pod; package agenttls). A volume is a
// PersistentVolumeClaim. Stop deletes the pod and keeps the claims and the
// Secret (the sandbox's identity); Provision makes a new pod on them.
//
// It reads the cluster through one shared informer factory limited to its
// namespace and to the objects it labelled (managed-by berth and its
// instance), and writes through client-go. Network mode egress is a
// NetworkPolicy per sandbox and berth's DNS-pinned resolver for pods
// (egress.go, egress_resolver.go); forks and snapshots are CSI
// VolumeSnapshots of the owned claims (snapshot.go); pods of the gVisor
// class are frozen in place (pause, quarantine) by berth's node agent on
// their node (freeze.go, package nodeagent). What a pod cannot do —
// freeze outside that class, checkpoint, capture its files where the
// cluster has no CSI snapshots, secrets injected at egress — is said in
// the classes' Caps and
// refused with errdefs.ErrNotSupported and a reason: a capability no pod
// has is a node capability interface it does not implement, whose refusal
// node.Need takes from Refuse (refused.go).
//
// Files: kube.go (the informers), objects.go (pure object builders),
// refused.go, egress.go (the policy's egress spec is a pure function of the
// rules and pins kept in its annotations, so any replica may change it,
// read from the API and updated with a conflict retry; expired pins dropped
// in Tick), egress_resolver.go (the asking pod by source IP, REFUSED for
// others, NXDOMAIN for names no rule allows, the pin written into the policy
// before the answer; per-source rate, in-flight and TCP connection caps;
// serve --kube-resolver-*), snapshot.go (refused with the reason where the
// cluster serves no snapshot API or has no VolumeSnapshotClass for the
// claims' driver), sweep.go (Recover and Sweep adopt or remove labelled
// objects and unrecorded captures). internal/daemon/kube.go maps the flags;
// docs/kubernetes.md is the full description and its tests.
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"

	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/node/kube/nodeagent"
	"github.com/berth-sh/berth/internal/sandbox"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClassMap is one runtime class berth offers and the Kubernetes
// RuntimeClass its pods name ("" for the cluster's default handler).
type ClassMap struct {
	Name         string
	RuntimeClass string
}

// Config configures the backend.
type Config struct {
	// Client talks to the API server (NewClient makes one).
	Client kubernetes.Interface
	// Namespace holds every object the backend makes.
	Namespace string
	// Instance names this berth installation in the labels, so two of
	// them sharing a namespace never sweep each other's pods. Replicas of
	// one installation share it. Default "berth".
	Instance string
	// Classes are berth's runtime classes, the default first (default:
	// one class "runc" on the cluster's default handler).
	Classes []ClassMap
	// AgentImage holds the agent binary (cmd/berth-agent) at
	// AgentImagePath; its init container copies it into the pod.
	AgentImage     string
	AgentImagePath string // default "/berth-agent"
	// Image is the sandbox container's image (its root filesystem) for
	// templates TemplateImages does not name.
	Image          string
	TemplateImages map[string]string
	// PullPolicy of both images ("" is Kubernetes' default).
	PullPolicy corev1.PullPolicy
	// StorageClass of the volumes' claims ("" the cluster's default).
	StorageClass string
	// Snapshots talks to the snapshot.storage.k8s.io API (NewClient makes
	// one); nil refuses captures.
	Snapshots snapclient.Interface
	// SnapshotClass is the VolumeSnapshotClass of captures ("" the one
	// for the claims' CSI driver: its default, or its only one).
	SnapshotClass string
	// CaptureGrace is how old a capture no record keeps must be before a
	// sweep removes it (another replica may be between its capture and
	// its record). Default max(10 min, 3 × ReadyTimeout).
	CaptureGrace time.Duration
	// NodeName, when set, binds every pod to that node (a cluster without
	// a scheduler, or one machine set aside for sandboxes).
	NodeName string
	// NodeSelector and Tolerations place pods on the nodes set aside for
	// sandboxes (a gVisor or Kata node pool, tainted so other workloads
	// stay off it).
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	// UserNamespaces runs pods with hostUsers: false (nodes that support
	// it: idmapped mounts, a recent runtime).
	UserNamespaces bool
	// AgentPort is the agent's TCP port in the pod. Default 7070.
	AgentPort int
	// MaxVolume is the largest volume or disk cap admitted. Default 1 TiB.
	MaxVolume int64
	// ReadyTimeout bounds a pod's wait to run and its agent to answer.
	ReadyTimeout time.Duration
	// Resolver configures network mode egress (egress.go); without its
	// Address the mode is refused.
	Resolver ResolverConfig
	// NodeAgent reaches berth's node agent on each node (freeze.go):
	// with it, the gVisor class (GVisorClass) freezes.
	NodeAgent NodeAgentConfig
	Logger    *slog.Logger
}

// NewClient returns a client from kubeconfig, or from the pod's service
// account when kubeconfig is "" and berth runs in a cluster.
func NewClient(kubeconfig string) (kubernetes.Interface, *rest.Config, error) {
	c, _, rc, err := NewClients(kubeconfig)
	return c, rc, err
}

// NewClients is NewClient with the snapshot.storage.k8s.io client too.
func NewClients(kubeconfig string) (kubernetes.Interface, snapclient.Interface, *rest.Config, error) {
	var rc *rest.Config
	var err error
	if kubeconfig == "" {
		rc, err = rest.InClusterConfig()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
		}
	} else {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
		}
	}
	rc.UserAgent = "berth"
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, nil, err
	}
	sc, err := snapclient.NewForConfig(rc)
	if err != nil {
		return nil, nil, nil, err
	}
	return c, sc, rc, nil
}

// Backend runs sandboxes as pods.
type Backend struct {
	cfg     Config
	log     *slog.Logger
	client  kubernetes.Interface
	classes []node.Class
	rcOf    map[string]string // berth class -> RuntimeClass
	snap    snapclient.Interface
	snaps   snapSupport // what detectSnapshots found (snapshot.go)

	factory  informers.SharedInformerFactory
	pods     corelisters.PodLister
	claims   corelisters.PersistentVolumeClaimLister
	secrets  corelisters.SecretLister
	policies networkinglisters.NetworkPolicyLister
	podIndex cache.Indexer // pods by IP (the resolver's source lookup)
	resolver *resolver
	stopInf  chan struct{}
	stopOnce sync.Once

	mu     sync.Mutex
	agents map[string]*agentEntry // by sandbox id (agent.go)
	cpu    map[string]*cpuSample  // by sandbox id (lifecycle.go)
	// capturing counts this process's operations using a capture, by
	// name (a sweep leaves those alone).
	capturing map[string]int

	refused atomic.Uint64
	hooks   node.Hooks

	nodeAgent *nodeagent.Client // nil: no node agent (freeze.go)
}

// A pod can be captured (CSI VolumeSnapshots, where the cluster has a
// snapshot class) and given egress rules (a NetworkPolicy and berth's
// resolver); for the capabilities it lacks, see Refuse.
var (
	_ node.Backend  = (*Backend)(nil)
	_ node.Capturer = (*Backend)(nil)
	_ node.Egress   = (*Backend)(nil)
	_ node.Refuser  = (*Backend)(nil)
)

// Caps of every class on Kubernetes: ports through the agent (the pod's
// network is the cluster's), nothing that needs the node's kernel from
// the daemon's side. Warm pools are running pods (no freeze), and a pod's
// hostname is fixed when it is made (no rename). Capture is added at New
// where the cluster can snapshot the claims (snapshot.go), Egress where
// berth's resolver is configured, Freeze for the gVisor class where a node
// agent is (freeze.go).
var podCaps = node.Caps{PortsViaAgent: true, Pool: true}

// New opens the backend and fills its caches: the namespace must be
// readable and the informers must sync within ReadyTimeout.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	if cfg.Client == nil || cfg.Namespace == "" {
		return nil, errors.New("kubernetes backend: a client and a namespace are required")
	}
	if cfg.AgentImage == "" || cfg.Image == "" {
		return nil, errors.New("kubernetes backend: --agent-image and --image are required")
	}
	if cfg.Instance == "" {
		cfg.Instance = "berth"
	}
	if cfg.AgentImagePath == "" {
		cfg.AgentImagePath = "/berth-agent"
	}
	if cfg.AgentPort == 0 {
		cfg.AgentPort = 7070
	}
	if cfg.MaxVolume == 0 {
		cfg.MaxVolume = 1 << 40
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 2 * time.Minute
	}
	cfg.Resolver.defaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CaptureGrace <= 0 {
		cfg.CaptureGrace = max(10*time.Minute, 3*cfg.ReadyTimeout)
	}
	if len(cfg.Classes) == 0 {
		cfg.Classes = []ClassMap{{Name: "runc"}}
	}
	if err := checkNames(cfg); err != nil {
		return nil, err
	}
	b := &Backend{cfg: cfg, log: cfg.Logger, client: cfg.Client, rcOf: map[string]string{},
		agents: map[string]*agentEntry{}, cpu: map[string]*cpuSample{}, capturing: map[string]int{}, stopInf: make(chan struct{}),
		hooks: node.Hooks{Event: func(*sandbox.Event) {}, Flow: func(node.Flow) {}}}
	b.snap = cfg.Snapshots
	nctx, ncancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	err := b.initNodeAgent(nctx)
	ncancel()
	if err != nil {
		return nil, err
	}
	dctx, dcancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	b.snaps = b.detectSnapshots(dctx)
	dcancel()
	caps := podCaps
	caps.Capture = b.snaps.why == ""
	if caps.Capture {
		b.log.Info("kubernetes captures through CSI VolumeSnapshots", "class", b.snaps.class)
	} else {
		b.log.Info("kubernetes captures refused", "why", b.snaps.why)
	}
	for _, c := range cfg.Classes {
		if _, dup := b.rcOf[c.Name]; dup || c.Name == "" {
			return nil, fmt.Errorf("kubernetes backend: runtime class %q empty or named twice", c.Name)
		}
		b.rcOf[c.Name] = c.RuntimeClass
		caps := caps
		caps.Egress = b.egressOn()
		caps.Freeze = b.freezes(c.Name)
		b.classes = append(b.classes, node.Class{Name: c.Name, Caps: caps})
	}
	sel := labels.Set{LabelManagedBy: ManagedBy, LabelInstance: cfg.Instance}.String()
	b.factory = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
	b.pods = b.factory.Core().V1().Pods().Lister()
	b.claims = b.factory.Core().V1().PersistentVolumeClaims().Lister()
	b.secrets = b.factory.Core().V1().Secrets().Lister()
	if b.egressOn() {
		if err := b.initEgress(); err != nil {
			return nil, err
		}
	}
	b.factory.Start(b.stopInf)
	sctx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	defer cancel()
	for typ, ok := range b.factory.WaitForCacheSync(sctx.Done()) {
		if !ok {
			b.Close(false)
			return nil, fmt.Errorf("kubernetes backend: the %v cache of namespace %s did not sync (is it readable with these credentials?)", typ, cfg.Namespace)
		}
	}
	if b.egressOn() && cfg.Resolver.Listen != "" {
		r, err := startResolver(b)
		if err != nil {
			b.Close(false)
			return nil, err
		}
		b.resolver = r
	}
	return b, nil
}

// checkNames refuses configuration Kubernetes would refuse later, one
// pod at a time.
func checkNames(cfg Config) error {
	if !dnsLabel(cfg.Namespace) {
		return fmt.Errorf("kubernetes backend: namespace %q is not a DNS label", cfg.Namespace)
	}
	if !labelValue(cfg.Instance) {
		return fmt.Errorf("kubernetes backend: instance %q is not a label value", cfg.Instance)
	}
	if cfg.AgentPort < 1 || cfg.AgentPort > 65535 {
		return fmt.Errorf("kubernetes backend: agent port %d", cfg.AgentPort)
	}
	for _, c := range cfg.Classes {
		if c.RuntimeClass != "" && !dnsSubdomain(c.RuntimeClass) {
			return fmt.Errorf("kubernetes backend: RuntimeClass %q of class %s is not a DNS subdomain", c.RuntimeClass, c.Name)
		}
	}
	return nil
}

// Start keeps the engine's hooks.
func (b *Backend) Start(h node.Hooks) {
	if h.Event != nil {
		b.hooks.Event = h.Event
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if h.Flow != nil {
		b.hooks.Flow = h.Flow
	}
	b.hooks.Slots = h.Slots
}

// Close stops the informers. Pods keep running (keepNetwork is moot: the
// cluster owns the network).
func (b *Backend) Close(keepNetwork bool) {
	b.stopOnce.Do(func() {
		if b.resolver != nil {
			b.resolver.close()
		}
		close(b.stopInf)
		b.factory.Shutdown()
		if b.nodeAgent != nil {
			b.nodeAgent.Close()
		}
	})
}

// Classes lists the runtime classes, the default first.
func (b *Backend) Classes() []node.Class { return b.classes }

// runtimeClass returns the RuntimeClass of sb's class ("" none).
func (b *Backend) runtimeClass(sb *sandbox.Sandbox) (string, error) {
	name := sb.Spec.Runtime
	if name == "" {
		name = b.classes[0].Name
	}
	rc, ok := b.rcOf[name]
	if !ok {
		return "", fmt.Errorf("runtime class %q is not offered by this kubernetes backend", name)
	}
	return rc, nil
}

// Isolation describes sb's boundary as the pod spec sets it.
func (b *Backend) Isolation(sb *sandbox.Sandbox) node.Isolation {
	rc, _ := b.runtimeClass(sb)
	name := sb.Spec.Runtime
	if name == "" {
		name = b.classes[0].Name
	}
	iso := node.Isolation{Runtime: name, SharedKernel: rc == "" || name == "runc", UserNamespace: b.cfg.UserNamespaces,
		Seccomp: "RuntimeDefault", Capabilities: keptCaps, NoNewPrivs: true, IDMode: sandbox.IDModeShared,
		HostIDs: 65536, UsernsOwner: "host-root"}
	if b.cfg.UserNamespaces {
		iso.UsernsOwner = "kubelet"
	}
	return iso
}

// IDRange: there are no host id slots; the node's runtime maps ids.
func (b *Backend) IDRange(slot int) (sandbox.HostIDs, bool) {
	return sandbox.HostIDs{Slot: -1, Size: 65536, Mode: sandbox.IDModeShared}, false
}

// AgentRefusals counts agent connections refused for who listened.
func (b *Backend) AgentRefusals() uint64 { return b.refused.Load() }

// emit hands an event to the engine.
func (b *Backend) emit(ev *sandbox.Event) {
	if ev.Actor == "" {
		ev.Actor = "daemon"
	}
	b.hooks.Event(ev)
}

// podOf returns sb's pod from the cache (nil: none).
func (b *Backend) podOf(id string) *corev1.Pod {
	p, err := b.pods.Pods(b.cfg.Namespace).Get(podName(id))
	if err != nil {
		return nil
	}
	return p
}

// waitCache polls the informer cache (no API request) until done says
// so, ctx ends or the deadline passes.
func waitCache(ctx context.Context, timeout time.Duration, what string, done func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}
