package kubeenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"github.com/berth-sh/berth/internal/testenv"
)

// Options says what to start beside etcd and kube-apiserver.
type Options struct {
	// Node starts one real node: containerd, a CNI bridge, kubelet
	// (root only). Without it pods stay Pending.
	Node bool
	// Scheduler runs kube-scheduler; without it a pod runs only where its
	// spec.nodeName puts it.
	Scheduler bool
	// ControllerManager runs kube-controller-manager (Deployments,
	// ReplicaSets, garbage collection of owner references, service-account
	// tokens, PV binding); without it those objects just sit.
	ControllerManager bool
	// APIServerArgs are more kube-apiserver flags (--feature-gates=...).
	APIServerArgs []string
	// CSI runs a CSI storage stack with snapshots on the node (csi.go;
	// implies Node and ControllerManager): StorageClass CSIStorageClass,
	// VolumeSnapshotClass CSISnapshotClass.
	CSI bool
	// ServiceProxy runs kube-proxy (iptables mode) for the node (implies
	// Node), so a pod reaches a Service's ClusterIP (ServiceCIDR) as on
	// any cluster; serviceproxy.go.
	ServiceProxy bool
	// GVisor gives the node a runsc runtime handler (gVisor's shim, built
	// by scripts/k8s-runsc-tools.sh) and the cluster RuntimeClass
	// GVisorRuntimeClass naming it (implies Node); gvisor.go.
	GVisor bool
}

// ServiceCIDR is the cluster's Service range (kube-apiserver's
// --service-cluster-ip-range).
const ServiceCIDR = "10.96.0.0/16"

// Cluster is a running test cluster.
type Cluster struct {
	// Dir holds everything it made (/tmp/berth-k8s-XXXX).
	Dir string
	// ID is its random hex name part: cgroup parent /berth-k8s-<ID>,
	// bridge bk<ID>.
	ID string
	// Server is the apiserver's URL (https://127.0.0.1:<port>).
	Server string
	// Kubeconfig is an admin (system:masters) kubeconfig file.
	Kubeconfig string
	// Config and Client are the admin's.
	Config *rest.Config
	Client kubernetes.Interface
	// CAPEM is the cluster CA, which signs the apiserver's serving cert.
	CAPEM []byte
	// NodeName is the real node's name ("" without Options.Node).
	NodeName string
	// Bins are the binaries it runs.
	Bins Binaries

	opts  Options
	ca    *ca
	procs []*proc
	node  *node
	csi   *csiStack
	runsc RunscBinaries
	// host are processes a test started beside the node (StartProcess),
	// stopped first.
	host []*proc
}

// Start starts a cluster, or fails t saying what is missing. Everything is
// stopped and removed in t.Cleanup.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	bins, err := FindBinaries()
	if err != nil {
		t.Fatal(err)
	}
	if opts.CSI {
		opts.Node, opts.ControllerManager = true, true
	}
	if opts.ServiceProxy || opts.GVisor {
		opts.Node = true
	}
	var runsc RunscBinaries
	if opts.GVisor {
		if runsc, err = FindRunscBinaries(); err != nil {
			t.Fatal(err)
		}
	}
	if opts.Node && os.Geteuid() != 0 {
		t.Fatal("kubeenv: a node (containerd, kubelet, CNI bridge) needs root")
	}
	dir, err := testenv.TempDir("", "k8s")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Dir: dir, ID: randHex(3), Bins: bins, opts: opts, runsc: runsc}
	t.Cleanup(func() { c.cleanup(t) })
	logs := filepath.Join(dir, "logs")
	pki := filepath.Join(dir, "pki")
	for _, d := range []string{logs, pki, filepath.Join(dir, "etcd")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if c.ca, err = newCA(); err != nil {
		t.Fatal(err)
	}
	c.CAPEM = c.ca.pem
	caPath := filepath.Join(pki, "ca.crt")
	must(t, os.WriteFile(caPath, c.ca.pem, 0o644))
	ports, err := freePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]

	// etcd: plain HTTP, loopback only, its data under Dir; fsync off (a
	// test cluster is thrown away).
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	etcd, err := start(logs, "etcd", bins.Etcd,
		"--name=test", "--data-dir="+filepath.Join(dir, "etcd", "data"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=test="+peerURL, "--initial-cluster-state=new",
		"--unsafe-no-fsync", "--log-level=warn")
	if err != nil {
		t.Fatal(err)
	}
	c.procs = append(c.procs, etcd)
	if err := waitFor(60*time.Second, "etcd /health", func() (bool, error) {
		resp, err := http.Get(etcdURL + "/health")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}, etcd); err != nil {
		fatalf(t, []*proc{etcd}, "kubeenv: %v", err)
	}

	// kube-apiserver.
	serving, err := c.ca.issue("kube-apiserver", nil, true,
		"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
	must(t, err)
	servingCrt, servingKey, err := serving.write(pki, "apiserver")
	must(t, err)
	kc, err := c.ca.issue("kube-apiserver-kubelet-client", []string{"system:masters"}, false)
	must(t, err)
	kcCrt, kcKey, err := kc.write(pki, "apiserver-kubelet-client")
	must(t, err)
	saPub, saKey, err := serviceAccountKey(pki)
	must(t, err)
	c.Server = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--cert-dir=" + pki,
		"--tls-cert-file=" + servingCrt, "--tls-private-key-file=" + servingKey,
		"--client-ca-file=" + caPath,
		"--kubelet-client-certificate=" + kcCrt, "--kubelet-client-key=" + kcKey,
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + saPub, "--service-account-signing-key-file=" + saKey,
		"--api-audiences=https://kubernetes.default.svc.cluster.local",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		// No controller watches a lease for the kubernetes Service's
		// endpoints here, and its only address would be loopback.
		"--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--allow-privileged=true",
		"--profiling=false",
		"--v=1",
	}
	api, err := start(logs, "kube-apiserver", bins.APIServer, append(args, opts.APIServerArgs...)...)
	if err != nil {
		t.Fatal(err)
	}
	c.procs = append(c.procs, api)
	admin, err := c.ca.issue("berth-test-admin", []string{"system:masters"}, false)
	must(t, err)
	c.Kubeconfig = filepath.Join(dir, "admin.kubeconfig")
	must(t, kubeconfig(c.Kubeconfig, c.Server, c.ca.pem, "admin", admin))
	c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	must(t, err)
	c.Config.QPS, c.Config.Burst = 200, 400
	c.Client = kubernetes.NewForConfigOrDie(c.Config)
	ctx := context.Background()
	if err := waitFor(90*time.Second, "kube-apiserver /readyz", func() (bool, error) {
		var code int
		err := c.Client.CoreV1().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&code).Error()
		return err == nil && code == http.StatusOK, err
	}, api, etcd); err != nil {
		fatalf(t, []*proc{api}, "kubeenv: %v", err)
	}
	// The namespace controller of the apiserver makes "default"; its
	// ServiceAccount and root CA ConfigMap are controller-manager work.
	if err := waitFor(30*time.Second, "namespace default", func() (bool, error) {
		_, err := c.Client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	}, api); err != nil {
		fatalf(t, []*proc{api}, "kubeenv: %v", err)
	}
	if err := c.populate(ctx, "default"); err != nil {
		t.Fatal(err)
	}

	if opts.Scheduler {
		c.startScheduler(t)
	}
	if opts.ControllerManager {
		c.startControllerManager(t, saKey)
	}
	if opts.Node {
		c.startNode(t)
	}
	if opts.GVisor {
		c.createRuntimeClass(t)
	}
	if opts.ServiceProxy {
		c.startServiceProxy(t)
	}
	if opts.CSI {
		c.startCSI(t)
	}
	return c
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// populate gives namespace ns what kube-controller-manager would: the
// default ServiceAccount (the ServiceAccount admission plugin rejects pods
// without it) and the kube-root-ca.crt ConfigMap (every projected
// service-account token volume mounts it: a pod waits for it forever).
func (c *Cluster) populate(ctx context.Context, ns string) error {
	_, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubeenv: default ServiceAccount in %s: %w", ns, err)
	}
	_, err = c.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"},
		Data:       map[string]string{"ca.crt": string(c.CAPEM)},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubeenv: kube-root-ca.crt in %s: %w", ns, err)
	}
	return nil
}

// CreateNamespace makes namespace name ready for pods (its default
// ServiceAccount and root CA ConfigMap, made by hand when no
// controller-manager runs).
func (c *Cluster) CreateNamespace(t testing.TB, name string) {
	t.Helper()
	ctx := context.Background()
	_, err := c.Client.CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := c.populate(ctx, name); err != nil {
		t.Fatal(err)
	}
}

// UserConfig is a client config for user in groups, authenticated by a
// client cert of the cluster CA: what RBAC tests impersonate nobody with.
func (c *Cluster) UserConfig(t testing.TB, user string, groups ...string) *rest.Config {
	t.Helper()
	kp, err := c.ca.issue(user, groups, false)
	must(t, err)
	cfg := rest.CopyConfig(c.Config)
	cfg.CertData, cfg.KeyData = kp.cert, kp.key
	cfg.CertFile, cfg.KeyFile = "", ""
	return cfg
}

// ServiceAccountConfig is a client config that authenticates as
// ServiceAccount ns/name with a bound token (TokenRequest), as a pod of it
// would.
func (c *Cluster) ServiceAccountConfig(t testing.TB, ns, name string) *rest.Config {
	t.Helper()
	exp := int64(3600)
	tr, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	must(t, err)
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = tr.Status.Token
	return cfg
}

// markReady does the node lifecycle controller's part for a Ready node
// when no controller-manager runs: the apiserver's TaintNodesByCondition
// admission taints every new node not-ready:NoSchedule and only that
// controller lifts it, so the scheduler would place nothing.
func (c *Cluster) markReady(ctx context.Context, name string) error {
	if c.opts.ControllerManager {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		taints := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
		if len(taints) == len(n.Spec.Taints) {
			return nil
		}
		n.Spec.Taints = taints
		_, err = c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

func (c *Cluster) cleanup(t testing.TB) {
	t.Helper()
	if t.Failed() {
		for _, p := range c.procs {
			t.Logf("--- %s log (last 25 lines) ---\n%s", p.name, p.tail(25))
		}
	}
	for i := len(c.host) - 1; i >= 0; i-- {
		c.host[i].stop(10 * time.Second)
	}
	if c.node != nil {
		c.teardownNode(t)
	}
	// Reverse start order: controllers, apiserver, etcd.
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop(10 * time.Second)
	}
	c.csi.stop()
	if err := testenv.RemoveDir(c.Dir); err != nil {
		t.Errorf("kubeenv: remove %s: %v", c.Dir, err)
	}
}

// StartProcess runs bin with args on the host beside the cluster (what a
// DaemonSet would run on the node), its output in the cluster's logs dir
// as <name>.log; the cluster's cleanup stops it by pid, before the node.
func (c *Cluster) StartProcess(t testing.TB, name, bin string, args ...string) {
	t.Helper()
	p, err := start(filepath.Join(c.Dir, "logs"), name, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	c.host = append(c.host, p)
}

// ProcessLog is the end (n lines) of the log of a process StartProcess
// started.
func (c *Cluster) ProcessLog(name string, n int) string {
	return tailFile(filepath.Join(c.Dir, "logs", name+".log"), n)
}
