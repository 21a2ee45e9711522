package kube

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-sh/berth/internal/agent/agenttls"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
)

func testBackend() *Backend {
	return &Backend{cfg: Config{Namespace: "sandboxes", Instance: "berth", AgentImage: "berth:dev", AgentImagePath: "/berth-agent",
		Image: "base:1", TemplateImages: map[string]string{"python": "python:3"}, AgentPort: 7070, NodeName: "n1"},
		rcOf:    map[string]string{"runc": "", "runsc": "gvisor"},
		classes: []node.Class{{Name: "runc", Caps: podCaps}, {Name: "runsc", Caps: podCaps}}}
}

func testSandbox() *sandbox.Sandbox {
	return &sandbox.Sandbox{ID: "abc123def456ghi7", Name: "My_Box.1", Spec: sandbox.Spec{Template: "python", Runtime: "runsc",
		Resources: sandbox.Resources{CPUs: 1.5, MemoryBytes: 512 << 20, Pids: 512, DiskBytes: 1 << 30},
		Volumes:   []sandbox.VolumeMount{{VolumeID: "vol1", Path: "/workspace", Owned: true}, {VolumeID: "vol2", Path: "/data", ReadOnly: true}}}}
}

// The pod carries what the record says: class, image, limits, volumes,
// labels; the agent is the container's command; the identity Secret is
// mounted with the agent's parts only.
func TestPodFor(t *testing.T) {
	b, sb := testBackend(), testSandbox()
	rc, err := b.runtimeClass(sb)
	if err != nil || rc != "gvisor" {
		t.Fatalf("runtimeClass = %q, %v", rc, err)
	}
	p := b.podFor(sb, rc)
	if p.Name != "berth-abc123def456ghi7" || p.Namespace != "sandboxes" {
		t.Errorf("name %s/%s", p.Namespace, p.Name)
	}
	for k, v := range map[string]string{LabelSandbox: sb.ID, LabelManagedBy: "berth", LabelInstance: "berth"} {
		if p.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, p.Labels[k], v)
		}
	}
	if p.Spec.RuntimeClassName == nil || *p.Spec.RuntimeClassName != "gvisor" {
		t.Errorf("runtimeClassName = %v", p.Spec.RuntimeClassName)
	}
	if p.Spec.NodeName != "n1" || p.Spec.RestartPolicy != corev1.RestartPolicyNever || p.Spec.Hostname != "my-box-1" {
		t.Errorf("node %q restart %q hostname %q", p.Spec.NodeName, p.Spec.RestartPolicy, p.Spec.Hostname)
	}
	if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
		t.Error("the sandbox gets a service account token")
	}
	c := p.Spec.Containers[0]
	if c.Image != "python:3" {
		t.Errorf("image %q, want the template's", c.Image)
	}
	if want := []string{"/.berth/bin/berth", "--listen-tcp", ":7070", "--tls-dir", "/.berth/tls"}; !slices.Equal(c.Command, want) {
		t.Errorf("command %q", c.Command)
	}
	if got := c.Resources.Limits[corev1.ResourceCPU]; got.MilliValue() != 1500 {
		t.Errorf("cpu %s", got.String())
	}
	if got := c.Resources.Limits[corev1.ResourceMemory]; got.Value() != 512<<20 {
		t.Errorf("memory %s", got.String())
	}
	if got := c.Resources.Limits[corev1.ResourceEphemeralStorage]; got.Value() != 1<<30 {
		t.Errorf("ephemeral storage %s", got.String())
	}
	if !equalResources(c.Resources.Limits, c.Resources.Requests) {
		t.Error("requests differ from limits: not Guaranteed")
	}
	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		!slices.Contains(sc.Capabilities.Drop, "ALL") || slices.Contains(sc.Capabilities.Add, "NET_RAW") || slices.Contains(sc.Capabilities.Add, "SYS_ADMIN") {
		t.Errorf("security context %+v", sc)
	}
	init := p.Spec.InitContainers[0]
	if init.Image != "berth:dev" || !slices.Equal(init.Command, []string{"/berth-agent", "--install", "/.berth/bin/berth"}) {
		t.Errorf("init container %s %q", init.Image, init.Command)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range p.Spec.Volumes {
		vols[v.Name] = v
	}
	if ed := vols["berth-secrets"].EmptyDir; ed == nil || ed.Medium != corev1.StorageMediumMemory || ed.SizeLimit == nil || ed.SizeLimit.Value() != 1<<20 {
		t.Errorf("secrets volume %+v: want a 1 MiB memory-backed emptyDir (a tmpfs)", vols["berth-secrets"])
	}
	sec := vols["berth-tls"].Secret
	if sec == nil || sec.SecretName != "berth-abc123def456ghi7-agent" {
		t.Fatalf("identity volume %+v", vols["berth-tls"])
	}
	var keys []string
	for _, it := range sec.Items {
		keys = append(keys, it.Key)
	}
	if slices.Contains(keys, agenttls.DaemonKey) || !slices.Equal(keys, agenttls.AgentFiles) {
		t.Errorf("identity items %q: the daemon key must never reach the pod", keys)
	}
	if v := vols["vol-0"].PersistentVolumeClaim; v == nil || v.ClaimName != "berth-vol-vol1" || v.ReadOnly {
		t.Errorf("workspace claim %+v", vols["vol-0"])
	}
	if v := vols["vol-1"].PersistentVolumeClaim; v == nil || v.ClaimName != "berth-vol-vol2" || !v.ReadOnly {
		t.Errorf("read-only claim %+v", vols["vol-1"])
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	if m := mounts["/workspace"]; m.Name != "vol-0" || m.SubPath != "data" || m.ReadOnly {
		t.Errorf("workspace mount %+v", m)
	}
	if m := mounts["/data"]; !m.ReadOnly {
		t.Errorf("read-only volume mounted %+v", m)
	}
	if !mounts["/.berth/bin"].ReadOnly || !mounts["/.berth/tls"].ReadOnly {
		t.Error("the agent binary or identity is mounted writable")
	}
}

func equalResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

// The default class names no RuntimeClass; an unknown class is refused;
// a template without an image gets the default one.
func TestClassesAndImages(t *testing.T) {
	b, sb := testBackend(), testSandbox()
	sb.Spec.Runtime, sb.Spec.Template = "", "other"
	rc, err := b.runtimeClass(sb)
	if err != nil || rc != "" {
		t.Fatalf("default class: %q, %v", rc, err)
	}
	if p := b.podFor(sb, rc); p.Spec.RuntimeClassName != nil || p.Spec.Containers[0].Image != "base:1" {
		t.Errorf("runtimeClassName %v image %s", p.Spec.RuntimeClassName, p.Spec.Containers[0].Image)
	}
	sb.Spec.Runtime = "kata"
	if _, err := b.runtimeClass(sb); err == nil {
		t.Error("an unknown class is accepted")
	}
}

func TestResources(t *testing.T) {
	r := resources(sandbox.Resources{CPUs: 0.0101, MemoryBytes: 16 << 20})
	cpu := r.Limits[corev1.ResourceCPU]
	if cpu.MilliValue() != 11 { // rounded up: never below what was asked
		t.Errorf("cpu %s", cpu.String())
	}
	if _, ok := r.Limits[corev1.ResourceEphemeralStorage]; ok {
		t.Error("no disk cap became an ephemeral-storage limit")
	}
	if q := resource.MustParse("16Mi"); r.Limits.Memory().Cmp(q) != 0 {
		t.Errorf("memory %s", r.Limits.Memory())
	}
}

func TestHostname(t *testing.T) {
	for name, want := range map[string]string{
		"web":                          "web",
		"Web_Server.prod":              "web-server-prod",
		"---":                          "sb-abc123de",
		strings.Repeat("a", 80):        strings.Repeat("a", 63),
		strings.Repeat("a", 62) + "-b": strings.Repeat("a", 62),
	} {
		sb := &sandbox.Sandbox{ID: "abc123def456ghi7", Name: name}
		if got := podHostname(sb); got != want || !dnsLabel(got) {
			t.Errorf("podHostname(%q) = %q, want %q", name, got, want)
		}
	}
}

// Names the cluster would refuse are refused at open, not per pod.
func TestCheckNames(t *testing.T) {
	ok := Config{Namespace: "sb", Instance: "berth", AgentPort: 7070, Classes: []ClassMap{{Name: "runsc", RuntimeClass: "gvisor"}}}
	if err := checkNames(ok); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func(*Config){
		func(c *Config) { c.Namespace = "Bad_NS" },
		func(c *Config) { c.Instance = "a b" },
		func(c *Config) { c.AgentPort = 70000 },
		func(c *Config) { c.Classes[0].RuntimeClass = "G/visor" },
	} {
		c := ok
		c.Classes = slices.Clone(ok.Classes)
		bad(&c)
		if checkNames(c) == nil {
			t.Errorf("checkNames(%+v) accepted", c)
		}
	}
	for _, id := range []string{"", "UPPER", "a/b", "../x", strings.Repeat("a", 41)} {
		if validID(id) {
			t.Errorf("validID(%q)", id)
		}
	}
}

func TestStatusOf(t *testing.T) {
	now := metav1.Now()
	running := corev1.ContainerStatus{Name: "sandbox", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	for _, c := range []struct {
		p    corev1.Pod
		want node.Status
	}{
		{corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{running}}}, node.StatusRunning},
		{corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, node.StatusStopped},
		{corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, node.StatusStopped},
		{corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}, node.StatusStopped},
		{corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{running}}}, node.StatusStopped},
	} {
		if got := statusOf(&c.p); got != c.want {
			t.Errorf("statusOf(%+v) = %s, want %s", c.p.Status, got, c.want)
		}
	}
}

// What a pod cannot do is refused as not supported, with the reason.
func TestRefusals(t *testing.T) {
	b, sb := testBackend(), testSandbox()
	ctx := t.Context()
	_, _, capErr := b.Capture(ctx, sb, "x")
	_, _, allocErr := b.Allocate(ctx, sb.ID, func(string) bool { return false })
	// What no pod can do is a capability the backend lacks: the engine's
	// question (node.Need) is answered with the reason. Freeze is the
	// gVisor class's with a node agent (none here): its refusal comes
	// from the method (freeze_test.go).
	freezeErr := b.Freeze(ctx, sb)
	_, qreadErr := node.Need[node.RootLayer](b, node.OpQuarantine)
	_, cpErr := node.Need[node.Hibernator](b, node.OpHibernate)
	_, diffErr := node.Need[node.RootLayer](b, node.OpDiff)
	_, renameErr := node.Need[node.Renamer](b, node.OpRename)
	for name, err := range map[string]error{
		"freeze": freezeErr, "capture": capErr, "checkpoint": cpErr, "allocate": allocErr,
		"diff": diffErr, "set rules": b.SetRules(ctx, sb, true), "hostname": renameErr, "quarantine reads": qreadErr,
	} {
		if !errors.Is(err, errdefs.ErrNotSupported) || !strings.Contains(err.Error(), "kubernetes") {
			t.Errorf("%s: %v, want not supported naming kubernetes", name, err)
		}
	}
	persist := testSandbox()
	persist.Spec.PersistRoot = true
	if err := b.Provision(ctx, persist); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("persist_root provision: %v", err)
	}
	for _, c := range b.Classes() {
		if c.Caps.Freeze || c.Caps.Checkpoint || c.Caps.Egress || !c.Caps.Pool || c.Caps.Rename || c.Caps.InheritFDs || !c.Caps.PortsViaAgent {
			t.Errorf("class %s caps %+v", c.Name, c.Caps)
		}
	}
}

func TestPolicyFor(t *testing.T) {
	p := testBackend().policyFor("abc")
	if p.Spec.PodSelector.MatchLabels[LabelSandbox] != "abc" || len(p.Spec.Egress) != 0 || len(p.Spec.PolicyTypes) != 2 {
		t.Errorf("policy %+v", p.Spec)
	}
	if len(p.Spec.Ingress) != 1 || p.Spec.Ingress[0].Ports[0].Port.IntValue() != 7070 {
		t.Errorf("ingress %+v: want the agent's port only", p.Spec.Ingress)
	}
}
