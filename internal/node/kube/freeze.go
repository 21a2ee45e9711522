package kube

// Freezing gVisor pods (node.Freezer): pause, resume, a quarantine's
// freeze. The API server has no verb for it, so berth's node agent on the
// pod's node (package nodeagent, `berth kube-node-agent`, a DaemonSet)
// runs the node's runsc on the pod's sandbox; the daemon reaches it at the
// pod's status.hostIP and NodeAgentConfig.Port under mutual TLS with
// pinned certificates (the identity in Secret NodeAgentConfig.Secret,
// made here on first use; the DaemonSet mounts its node-agent parts).
// A class freezes when it is berth's gVisor class (named "runsc") on a
// RuntimeClass and a node agent is configured; every other class keeps
// the refusal (refused.go).

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-sh/berth/internal/agent/agenttls"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/node/kube/nodeagent"
	"github.com/berth-sh/berth/internal/sandbox"
)

// NodeAgentConfig reaches berth's node agent on each node (freezing gVisor
// pods).
type NodeAgentConfig struct {
	// Port is where the node agents listen on each node's address (a
	// hostNetwork DaemonSet). 0: no node agent, no class freezes.
	Port int
	// Secret holds the node agents' identity (agenttls: the node agent's
	// pair as agent.*, the daemon's as daemon.*) in the backend's
	// namespace; made on first use. Default "berth-node-agent".
	Secret string
}

// GVisorClass is the name of berth's gVisor runtime class (as on the local
// backend): on Kubernetes, pods of a RuntimeClass whose handler is runsc.
const GVisorClass = "runsc"

var _ node.Freezer = (*Backend)(nil)

// freezes reports whether pods of berth class name can be frozen.
func (b *Backend) freezes(name string) bool {
	return b.cfg.NodeAgent.Port != 0 && name == GVisorClass && b.rcOf[name] != ""
}

// freezable reports whether sb's class freezes.
func (b *Backend) freezable(sb *sandbox.Sandbox) bool {
	name := sb.Spec.Runtime
	if name == "" {
		name = b.classes[0].Name
	}
	return b.freezes(name)
}

// initNodeAgent makes (or reads) the node agents' identity and the client.
func (b *Backend) initNodeAgent(ctx context.Context) error {
	na := &b.cfg.NodeAgent
	if na.Port < 0 || na.Port > 65535 {
		return fmt.Errorf("kubernetes backend: node agent port %d", na.Port)
	}
	if na.Port == 0 {
		return nil
	}
	if na.Secret == "" {
		na.Secret = "berth-node-agent"
	}
	if !dnsSubdomain(na.Secret) {
		return fmt.Errorf("kubernetes backend: node agent Secret %q is not a DNS subdomain", na.Secret)
	}
	api := b.client.CoreV1().Secrets(b.cfg.Namespace)
	s, err := api.Get(ctx, na.Secret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		ident, ierr := agenttls.NewIdentity("node-agent")
		if ierr != nil {
			return ierr
		}
		yes := true
		s, err = api.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: na.Secret, Namespace: b.cfg.Namespace, Labels: map[string]string{
				LabelManagedBy: ManagedBy, LabelInstance: b.cfg.Instance, LabelKind: "node-agent"}},
			Type: corev1.SecretTypeOpaque, Immutable: &yes, Data: ident}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // a replica made it meanwhile
			s, err = api.Get(ctx, na.Secret, metav1.GetOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("kubernetes backend: node agent identity (Secret %s): %w", na.Secret, err)
	}
	ident := agenttls.Identity{}
	for k, v := range s.Data {
		ident[k] = bytes.Clone(v)
	}
	c, err := nodeagent.NewClient(ident, na.Port)
	if err != nil {
		return fmt.Errorf("kubernetes backend: node agent identity (Secret %s): %w", na.Secret, err)
	}
	b.nodeAgent = c
	return nil
}

// Freeze pauses sb's gVisor sandbox, keeping its processes and memory.
func (b *Backend) Freeze(ctx context.Context, sb *sandbox.Sandbox) error {
	return b.nodeOp(ctx, sb, "pause", nodeagent.StatusPaused, node.OpPause)
}

// Thaw resumes sb's gVisor sandbox.
func (b *Backend) Thaw(ctx context.Context, sb *sandbox.Sandbox) error {
	return b.nodeOp(ctx, sb, "resume", nodeagent.StatusRunning, node.OpResume)
}

// nodeOp asks the node agent on sb's pod's node for op and checks it
// answers want.
func (b *Backend) nodeOp(ctx context.Context, sb *sandbox.Sandbox, op, want, what string) error {
	if !b.freezable(sb) {
		return notOnKube(what, whyFreeze)
	}
	p, err := b.gvisorPod(ctx, sb)
	if err != nil {
		return err
	}
	got, err := b.nodeAgent.Do(ctx, p.Status.HostIP, b.cfg.Namespace, p.Name, op)
	if err != nil {
		return b.nodeAgentErr(sb, err)
	}
	if got != want {
		return fmt.Errorf("node agent: %s of pod %s answered %s", op, p.Name, got)
	}
	return nil
}

// nodeStatus asks the node agent whether sb's running pod is paused.
func (b *Backend) nodeStatus(ctx context.Context, sb *sandbox.Sandbox) (node.Status, error) {
	p, err := b.gvisorPod(ctx, sb)
	if err != nil {
		return "", err
	}
	got, err := b.nodeAgent.Do(ctx, p.Status.HostIP, b.cfg.Namespace, p.Name, "")
	if err != nil {
		return "", b.nodeAgentErr(sb, err)
	}
	if got == nodeagent.StatusPaused {
		return node.StatusPaused, nil
	}
	return node.StatusRunning, nil
}

// nodeAgentErr counts and reports a node agent that is not berth's.
func (b *Backend) nodeAgentErr(sb *sandbox.Sandbox, err error) error {
	if errors.Is(err, nodeagent.ErrRefused) {
		b.refused.Add(1)
		b.log.Warn("node agent refused", "sandbox", sb.ID, "err", err)
		b.emit(&sandbox.Event{SandboxID: sb.ID, Type: "security", Actor: "daemon",
			Cause: sandbox.CauseReconciler, Outcome: "refused", Message: err.Error()})
	}
	return fmt.Errorf("node agent: %w", err)
}

// gvisorPod is sb's running pod (from the API: the freshest status), which
// must be of its class's RuntimeClass and on a node.
func (b *Backend) gvisorPod(ctx context.Context, sb *sandbox.Sandbox) (*corev1.Pod, error) {
	rc, err := b.runtimeClass(sb)
	if err != nil {
		return nil, err
	}
	p, err := b.client.CoreV1().Pods(b.cfg.Namespace).Get(ctx, podName(sb.ID), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, errdefs.Conflict("sandbox %s has no pod", sb.ID)
	}
	if err != nil {
		return nil, err
	}
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Status.HostIP == "" {
		return nil, errdefs.Conflict("pod %s is %s", p.Name, p.Status.Phase)
	}
	if p.Spec.RuntimeClassName == nil || *p.Spec.RuntimeClassName != rc {
		return nil, errdefs.Conflict("pod %s does not run under RuntimeClass %s", p.Name, rc)
	}
	return p, nil
}
