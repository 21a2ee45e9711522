package kube

// The objects of one sandbox, as pure functions of the configuration and
// the record: names, labels, the pod, the claim of a volume, the Secret of
// the agent's identity and the deny-all NetworkPolicy.

import (
	"math"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/berth-sh/berth/internal/agent/agenttls"
	"github.com/berth-sh/berth/internal/agent/wire"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Labels berth puts on everything it makes; the informers and sweeps see
// only objects with LabelManagedBy and this instance's LabelInstance.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "berth"
	LabelInstance  = "berth.sh/instance"
	LabelSandbox   = "berth.sh/sandbox"
	LabelVolume    = "berth.sh/volume"
	// LabelKind says what an object is to its sandbox: pod, identity,
	// network (the claim of a volume carries LabelVolume instead).
	LabelKind = "berth.sh/kind"
)

// Paths inside the sandbox's container.
const (
	agentDir    = "/.berth/bin"
	agentBinary = agentDir + "/berth"
	tlsDir      = "/.berth/tls"
	// dataSubPath is where a volume's files live inside its claim, so a
	// filesystem's own entries (lost+found) stay out of the workspace.
	dataSubPath = "data"
)

func podName(id string) string      { return "berth-" + id }
func secretName(id string) string   { return "berth-" + id + "-agent" }
func policyName(id string) string   { return "berth-" + id + "-net" }
func claimName(volID string) string { return "berth-vol-" + volID }

var (
	dnsLabelRE    = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	labelValueRE  = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)
	dnsSubdomRE   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	notHostnameRE = regexp.MustCompile(`[^a-z0-9-]+`)
)

func dnsLabel(s string) bool     { return len(s) <= 63 && dnsLabelRE.MatchString(s) }
func labelValue(s string) bool   { return len(s) <= 63 && labelValueRE.MatchString(s) }
func dnsSubdomain(s string) bool { return len(s) <= 253 && dnsSubdomRE.MatchString(s) }

// validID: sandbox and volume ids become parts of names and label values.
func validID(id string) bool { return id != "" && len(id) <= 40 && dnsLabel(id) }

// podHostname is the pod's hostname: the sandbox's, folded into a DNS
// label (Kubernetes refuses anything else), or sb-<id prefix>.
func podHostname(sb *sandbox.Sandbox) string {
	h := notHostnameRE.ReplaceAllString(strings.ToLower(sb.Hostname()), "-")
	h = strings.Trim(h, "-")
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-")
	}
	if !dnsLabel(h) {
		return "sb-" + sb.ID[:min(8, len(sb.ID))]
	}
	return h
}

func (b *Backend) labels(id, kind string) map[string]string {
	return map[string]string{LabelManagedBy: ManagedBy, LabelInstance: b.cfg.Instance, LabelSandbox: id, LabelKind: kind}
}

// keptCaps are the capabilities the sandbox's container keeps: the
// runtime's default set less NET_RAW and MKNOD (as the local runc class).
var keptCaps = []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
	"NET_BIND_SERVICE", "SYS_CHROOT", "AUDIT_WRITE", "SETFCAP"}

// resources maps sb's limits: requests equal limits (the Guaranteed QoS
// class, so the node never overcommits a sandbox), the disk cap as
// ephemeral storage (the pod's writable layer and emptyDirs).
func resources(r sandbox.Resources) corev1.ResourceRequirements {
	l := corev1.ResourceList{}
	if r.CPUs > 0 {
		l[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(math.Ceil(r.CPUs*1000)), resource.DecimalSI)
	}
	if r.MemoryBytes > 0 {
		l[corev1.ResourceMemory] = *resource.NewQuantity(r.MemoryBytes, resource.BinarySI)
	}
	if r.DiskBytes > 0 {
		l[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(r.DiskBytes, resource.BinarySI)
	}
	return corev1.ResourceRequirements{Limits: l, Requests: l.DeepCopy()}
}

// imageOf is the sandbox container's image for sb's template.
func (b *Backend) imageOf(sb *sandbox.Sandbox) string {
	if img, ok := b.cfg.TemplateImages[sb.Spec.Template]; ok {
		return img
	}
	return b.cfg.Image
}

// secretsSize bounds the secrets tmpfs (memory the pod's limit counts).
const secretsSize = 1 << 20

// podFor is sb's pod. The berth binary comes from the agent image through
// an init container into an emptyDir; the identity Secret is mounted only
// here and only its agent parts (never the daemon's key); each volume is
// its claim's data directory.
func (b *Backend) podFor(sb *sandbox.Sandbox, runtimeClass string) *corev1.Pod {
	no := false
	env := []corev1.EnvVar{
		{Name: "PATH", Value: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		{Name: "BERTH_SANDBOX_ID", Value: sb.ID},
		{Name: "GOMAXPROCS", Value: "1"},
	}
	items := make([]corev1.KeyToPath, 0, len(agenttls.AgentFiles))
	for _, f := range agenttls.AgentFiles {
		items = append(items, corev1.KeyToPath{Key: f, Path: f})
	}
	mode := int32(0o400)
	volumes := []corev1.Volume{
		{Name: "berth-bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			SizeLimit: resource.NewQuantity(256<<20, resource.BinarySI)}}},
		{Name: "berth-tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: secretName(sb.ID), Items: items, DefaultMode: &mode}}},
		// The secrets tmpfs (as the local backend's OCI tmpfs): the agent
		// writes file secrets only to a tmpfs, never to a disk.
		{Name: "berth-secrets", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(secretsSize, resource.BinarySI)}}},
	}
	mounts := []corev1.VolumeMount{
		{Name: "berth-bin", MountPath: agentDir, ReadOnly: true},
		{Name: "berth-tls", MountPath: tlsDir, ReadOnly: true},
		{Name: "berth-secrets", MountPath: wire.SecretDir},
	}
	for i, vm := range sb.Spec.Volumes {
		name := "vol-" + strconv.Itoa(i)
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName(vm.VolumeID), ReadOnly: vm.ReadOnly}}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: vm.Path, SubPath: dataSubPath, ReadOnly: vm.ReadOnly})
	}
	port := int32(b.cfg.AgentPort)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName(sb.ID), Namespace: b.cfg.Namespace, Labels: b.labels(sb.ID, "pod")},
		Spec: corev1.PodSpec{
			Hostname:                     podHostname(sb),
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
			NodeName:                     b.cfg.NodeName,
			NodeSelector:                 b.cfg.NodeSelector,
			Tolerations:                  b.cfg.Tolerations,
			Volumes:                      volumes,
			InitContainers: []corev1.Container{{
				Name:            "berth-agent",
				Image:           b.cfg.AgentImage,
				ImagePullPolicy: b.cfg.PullPolicy,
				Command:         []string{b.cfg.AgentImagePath, "--install", agentBinary},
				VolumeMounts:    []corev1.VolumeMount{{Name: "berth-bin", MountPath: agentDir}},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
			}},
			Containers: []corev1.Container{{
				Name:            "sandbox",
				Image:           b.imageOf(sb),
				ImagePullPolicy: b.cfg.PullPolicy,
				Command:         []string{agentBinary, "--listen-tcp", ":" + strconv.Itoa(b.cfg.AgentPort), "--tls-dir", tlsDir},
				Env:             env,
				Ports:           []corev1.ContainerPort{{Name: "berth-agent", ContainerPort: port, Protocol: corev1.ProtocolTCP}},
				Resources:       resources(sb.Spec.Resources),
				VolumeMounts:    mounts,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no,
					Privileged:               &no,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: capList(keptCaps)},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
			}},
		},
	}
	if runtimeClass != "" {
		pod.Spec.RuntimeClassName = &runtimeClass
	}
	if b.cfg.UserNamespaces {
		pod.Spec.HostUsers = &no
	}
	b.egressDNS(sb, &pod.Spec)
	return pod
}

func capList(names []string) []corev1.Capability {
	out := make([]corev1.Capability, len(names))
	for i, n := range names {
		out[i] = corev1.Capability(n)
	}
	return out
}

// secretFor holds sandbox id's identity. Immutable: a stolen update
// right cannot swap the pins of a running sandbox.
func (b *Backend) secretFor(id string, ident agenttls.Identity) *corev1.Secret {
	yes := true
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName(id), Namespace: b.cfg.Namespace, Labels: b.labels(id, "identity")},
		Type:       corev1.SecretTypeOpaque,
		Immutable:  &yes,
		Data:       ident,
	}
}

// claimFor is volume id's claim of size bytes.
func (b *Backend) claimFor(id string, size int64) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claimName(id), Namespace: b.cfg.Namespace, Labels: map[string]string{
			LabelManagedBy: ManagedBy, LabelInstance: b.cfg.Instance, LabelVolume: id}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI)}},
		},
	}
	if b.cfg.StorageClass != "" {
		sc := b.cfg.StorageClass
		c.Spec.StorageClassName = &sc
	}
	return c
}

// policyFor denies sb's pod all egress and every ingress but the agent's
// port (network mode none). Where the cluster's network plugin does not
// enforce NetworkPolicy it is recorded and not in force (docs say so).
func (b *Backend) policyFor(id string) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	port := intstr.FromInt32(int32(b.cfg.AgentPort))
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: policyName(id), Namespace: b.cfg.Namespace, Labels: b.labels(id, "network")},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelSandbox: id, LabelInstance: b.cfg.Instance}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}}}},
			Egress:      nil,
		},
	}
}
