package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Provision makes sb's identity (once), its NetworkPolicy and its pod,
// and returns once the pod runs and its agent answers. A pod left from an
// earlier attempt that still runs is kept; one that ended or is going is
// replaced.
func (b *Backend) Provision(ctx context.Context, sb *sandbox.Sandbox) error {
	if err := b.provisionPod(ctx, sb); err != nil {
		return err
	}
	if err := b.WaitReady(ctx, sb); err != nil {
		return err
	}
	// /workspace is every sandbox's default working directory. Locally the
	// template has it; a pod's image is anyone's, and an ephemeral sandbox
	// has no claim there, so it is made (in the pod's own root layer) if
	// missing. Bounded by the daemon's deadline, not the agent's answer.
	mctx, cancel := context.WithTimeout(ctx, workspaceTimeout)
	defer cancel()
	if err := b.Agent(sb).Mkdir(mctx, workspaceDir, 0o755, true); err != nil {
		return fmt.Errorf("making %s in sandbox %s: %w", workspaceDir, sb.ID, err)
	}
	return nil
}

const (
	workspaceDir     = "/workspace"
	workspaceTimeout = 10 * time.Second
)

// provisionPod is Provision up to a running pod with an address: all of
// its API side (what the kwok scale test measures), without the agent.
func (b *Backend) provisionPod(ctx context.Context, sb *sandbox.Sandbox) error {
	if !validID(sb.ID) {
		return errdefs.Invalid("sandbox id %q cannot name Kubernetes objects", sb.ID)
	}
	if sb.Spec.PersistRoot {
		return errdefs.NotSupported("persist_root: a pod's root layer is its container runtime's and goes with the pod; " +
			"on kubernetes only volumes persist")
	}
	if sb.Spec.Network == "egress" && !b.egressOn() {
		return notOnKube("network mode egress", whyNoResolver)
	}
	for _, vm := range sb.Spec.Volumes {
		if !validID(vm.VolumeID) {
			return errdefs.Invalid("volume id %q cannot name a claim", vm.VolumeID)
		}
	}
	rc, err := b.runtimeClass(sb)
	if err != nil {
		return errdefs.Invalid("%v", err)
	}
	if err := b.ensureIdentity(ctx, sb.ID); err != nil {
		return err
	}
	if err := b.ensureNetwork(ctx, sb); err != nil {
		return err
	}
	want := b.podFor(sb, rc)
	if p := b.livePod(ctx, sb.ID); p != nil {
		if reusable(p) {
			return b.waitPod(ctx, sb)
		}
		if err := b.deletePod(ctx, sb.ID); err != nil {
			return err
		}
	}
	if _, err := b.client.CoreV1().Pods(b.cfg.Namespace).Create(ctx, want, metav1.CreateOptions{}); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			return errdefs.Invalid("the cluster refused sandbox %s's pod: %v", sb.ID, err)
		}
		return fmt.Errorf("creating pod %s: %w", want.Name, err)
	}
	return b.waitPod(ctx, sb)
}

// reusable: a pod of an earlier attempt that is not going away and has
// not ended.
func reusable(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && (p.Status.Phase == corev1.PodPending || p.Status.Phase == corev1.PodRunning || p.Status.Phase == "")
}

// livePod reads sb's pod from the API (not the cache: Provision must not
// create beside one the cache has not seen).
func (b *Backend) livePod(ctx context.Context, id string) *corev1.Pod {
	p, err := b.client.CoreV1().Pods(b.cfg.Namespace).Get(ctx, podName(id), metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return p
}

// waitPod waits for sb's pod to run with an IP. A pod that ends or
// cannot start (its image, its claims) is the error, with the reason
// Kubernetes gives.
func (b *Backend) waitPod(ctx context.Context, sb *sandbox.Sandbox) error {
	var why string
	err := waitCache(ctx, b.cfg.ReadyTimeout, "waiting for pod "+podName(sb.ID), func() (bool, error) {
		p := b.podOf(sb.ID)
		if p == nil {
			return false, nil
		}
		switch p.Status.Phase {
		case corev1.PodRunning:
			return p.Status.PodIP != "", nil
		case corev1.PodFailed, corev1.PodSucceeded:
			return false, fmt.Errorf("pod %s ended (%s): %s", p.Name, p.Status.Phase, podWhy(p))
		}
		why = podWhy(p)
		return false, nil
	})
	if err != nil {
		if why != "" {
			err = fmt.Errorf("%w: %s", err, why)
		}
		return err
	}
	return nil
}

// podWhy says why a pod does not run, from its conditions and container
// states.
func podWhy(p *corev1.Pod) string {
	var parts []string
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			parts = append(parts, string(c.Type)+": "+c.Message)
		}
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			parts = append(parts, cs.Name+": "+w.Reason+" "+w.Message)
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			parts = append(parts, fmt.Sprintf("%s: exit %d %s %s", cs.Name, t.ExitCode, t.Reason, t.Message))
		}
	}
	if len(parts) == 0 && p.Status.Reason != "" {
		parts = append(parts, p.Status.Reason+" "+p.Status.Message)
	}
	return strings.TrimSpace(strings.Join(parts, "; "))
}

// deletePod deletes sandbox id's pod at once (the agent, as PID 1,
// ignores SIGTERM: a grace period would only be waited out) and waits
// until the API no longer has it, so the next pod of that name can be
// made.
func (b *Backend) deletePod(ctx context.Context, id string) error {
	zero := int64(0)
	err := b.client.CoreV1().Pods(b.cfg.Namespace).Delete(ctx, podName(id), metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting pod %s: %w", podName(id), err)
	}
	return waitCache(ctx, b.cfg.ReadyTimeout, "waiting for pod "+podName(id)+" to go", func() (bool, error) {
		_, err := b.client.CoreV1().Pods(b.cfg.Namespace).Get(ctx, podName(id), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, nil
	})
}

// Stop deletes sb's pod; its claims and identity stay.
func (b *Backend) Stop(ctx context.Context, sb *sandbox.Sandbox) error {
	return b.deletePod(ctx, sb.ID)
}

// KillAll ends every process of sb: its pod goes.
func (b *Backend) KillAll(ctx context.Context, sb *sandbox.Sandbox) error {
	return b.deletePod(ctx, sb.ID)
}

// Discard: the writable layer that does not persist went with the pod.
func (b *Backend) Discard(ctx context.Context, sb *sandbox.Sandbox) error { return nil }

// Wipe empties a stopped sandbox's owned volumes: each claim is made
// anew, of its size (a pod would be needed to empty it in place).
func (b *Backend) Wipe(ctx context.Context, sb *sandbox.Sandbox) error {
	for _, vm := range sb.Spec.Volumes {
		if !vm.Owned {
			continue
		}
		c, err := b.client.CoreV1().PersistentVolumeClaims(b.cfg.Namespace).Get(ctx, claimName(vm.VolumeID), metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("volume %s: %w", vm.VolumeID, err)
		}
		size := c.Spec.Resources.Requests.Storage().Value()
		if err := b.DeleteVolume(vm.VolumeID); err != nil {
			return err
		}
		if err := b.waitClaimGone(ctx, vm.VolumeID); err != nil {
			return err
		}
		if err := b.CreateVolume(vm.VolumeID, size, 0); err != nil {
			return err
		}
	}
	return nil
}

// Remove deletes sb's pod, identity, NetworkPolicy and whatever else
// carries its label (its volumes' claims are the engine's to delete),
// then lists by label again: anything left is the error.
func (b *Backend) Remove(ctx context.Context, sb *sandbox.Sandbox) error {
	if err := b.deletePod(ctx, sb.ID); err != nil {
		return err
	}
	ns := b.cfg.Namespace
	sel := metav1.ListOptions{LabelSelector: labels.Set{LabelManagedBy: ManagedBy, LabelInstance: b.cfg.Instance, LabelSandbox: sb.ID}.String()}
	var errs []error
	if err := b.client.CoreV1().Secrets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		errs = append(errs, fmt.Errorf("deleting the identity: %w", err))
	}
	if err := b.client.NetworkingV1().NetworkPolicies(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("deleting the network policy: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	b.Forget(sb)
	left, err := b.leftOf(ctx, sb.ID)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("still present: %s", strings.Join(left, ", "))
	}
	return nil
}

// leftOf lists, from the API, the objects labelled with sandbox id.
func (b *Backend) leftOf(ctx context.Context, id string) ([]string, error) {
	ns := b.cfg.Namespace
	sel := metav1.ListOptions{LabelSelector: labels.Set{LabelManagedBy: ManagedBy, LabelInstance: b.cfg.Instance, LabelSandbox: id}.String()}
	var left []string
	pods, err := b.client.CoreV1().Pods(ns).List(ctx, sel)
	if err != nil {
		return nil, err
	}
	for _, p := range pods.Items {
		left = append(left, "pod "+p.Name)
	}
	secrets, err := b.client.CoreV1().Secrets(ns).List(ctx, sel)
	if err != nil {
		return nil, err
	}
	for _, s := range secrets.Items {
		left = append(left, "secret "+s.Name)
	}
	claims, err := b.client.CoreV1().PersistentVolumeClaims(ns).List(ctx, sel)
	if err != nil {
		return nil, err
	}
	for _, c := range claims.Items {
		left = append(left, "claim "+c.Name)
	}
	pols, err := b.client.NetworkingV1().NetworkPolicies(ns).List(ctx, sel)
	if err != nil {
		return nil, err
	}
	for _, p := range pols.Items {
		left = append(left, "networkpolicy "+p.Name)
	}
	return left, nil
}

// ensurePolicy makes sb's deny-all NetworkPolicy unless it exists.
func (b *Backend) ensurePolicy(ctx context.Context, id string) error {
	_, err := b.client.NetworkingV1().NetworkPolicies(b.cfg.Namespace).Create(ctx, b.policyFor(id), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("network policy: %w", err)
	}
	return nil
}

// Status reports sb's pod as the API sees it.
func (b *Backend) Status(ctx context.Context, sb *sandbox.Sandbox) (node.Status, error) {
	p, err := b.client.CoreV1().Pods(b.cfg.Namespace).Get(ctx, podName(sb.ID), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return node.StatusGone, nil
	}
	if err != nil {
		return "", err
	}
	st := statusOf(p)
	if st == node.StatusRunning && b.freezable(sb) {
		// Only the node sees a frozen gVisor pod; a node agent that
		// does not answer leaves the pod's own view.
		nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fst, err := b.nodeStatus(nctx, sb)
		cancel()
		if err == nil {
			st = fst
		} else {
			b.log.Warn("asking the node agent for a pod's status", "sandbox", sb.ID, "err", err)
		}
	}
	return st, nil
}

// statusOf maps a pod to what the engine knows: running only while its
// sandbox container runs.
func statusOf(p *corev1.Pod) node.Status {
	if p.DeletionTimestamp != nil {
		return node.StatusStopped
	}
	if p.Status.Phase == corev1.PodRunning {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == "sandbox" && cs.State.Running != nil {
				return node.StatusRunning
			}
		}
	}
	return node.StatusStopped
}

// Exited reports, from the cache, that sb's pod is gone or ended.
func (b *Backend) Exited(sb *sandbox.Sandbox) bool {
	p := b.podOf(sb.ID)
	return p == nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// InitLog returns the end of the sandbox container's log (the agent's).
func (b *Backend) InitLog(sb *sandbox.Sandbox, n int, wait time.Duration) string {
	if n <= 0 {
		return ""
	}
	limit := int64(n)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second+wait)
	defer cancel()
	rc, err := b.client.CoreV1().Pods(b.cfg.Namespace).GetLogs(podName(sb.ID), &corev1.PodLogOptions{Container: "sandbox", LimitBytes: &limit}).Stream(ctx)
	if err != nil {
		return ""
	}
	defer rc.Close()
	data, _ := io.ReadAll(io.LimitReader(rc, limit))
	return string(data)
}

// CPUUsage is the container's CPU time as its agent last reported it.
// The reconciler samples it on every pass for each idle policy, and a
// hostile agent can stall its answer: so the call never waits on the
// agent — it returns the latest sample and starts one refresh (at most
// one per sandbox in flight, 2 s at most) for the next pass. The figure
// is the sandbox's own word: it steers only that sandbox's idle policy.
func (b *Backend) CPUUsage(sb *sandbox.Sandbox) (time.Duration, error) {
	b.mu.Lock()
	c := b.cpu[sb.ID]
	if c == nil {
		c = &cpuSample{}
		b.cpu[sb.ID] = c
	}
	v, ok, err := c.usage, c.ok, c.err
	if !c.refreshing {
		c.refreshing = true
		go b.refreshCPU(sb, c)
	}
	b.mu.Unlock()
	if !ok {
		if err == nil {
			err = errors.New("no CPU sample yet")
		}
		return 0, err
	}
	return v, nil
}

// cpuSample is a sandbox's latest CPU reading (guarded by Backend.mu).
type cpuSample struct {
	usage      time.Duration
	ok         bool
	err        error
	refreshing bool
}

func (b *Backend) refreshCPU(sb *sandbox.Sandbox, c *cpuSample) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// cgroup v2's cpu.stat, else v1's cpuacct (nanoseconds).
	var usage time.Duration
	v, err := b.cgroupValue(ctx, sb, "cpu.stat", "usage_usec")
	if err == nil {
		usage = time.Duration(v) * time.Microsecond
	} else if n, err1 := b.cgroupNumber(ctx, sb, "cpuacct/cpuacct.usage"); err1 == nil {
		usage, err = time.Duration(n), nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c.refreshing = false
	if err != nil {
		c.err = err
		return
	}
	c.usage, c.ok, c.err = usage, true, nil
}

// OOMKills counts the container's processes the memory limit killed.
func (b *Backend) OOMKills(sb *sandbox.Sandbox) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := b.cgroupValue(ctx, sb, "memory.events", "oom_kill")
	if err != nil { // cgroup v1
		v, err = b.cgroupValue(ctx, sb, "memory/memory.oom_control", "oom_kill")
	}
	return uint64(v), err
}

// MemoryUsage is what the container's cgroup holds now (memory.current,
// page cache included), as its agent reads it: advisory only (a hostile
// agent may lie about its own sandbox; nothing enforced rests on it).
func (b *Backend) MemoryUsage(sb *sandbox.Sandbox) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := b.cgroupNumber(ctx, sb, "memory.current")
	if err != nil { // cgroup v1
		v, err = b.cgroupNumber(ctx, sb, "memory/memory.usage_in_bytes")
	}
	return v, err
}

// cgroupNumber reads a file of the container's cgroup holding one
// non-negative number, as its agent reads it.
func (b *Backend) cgroupNumber(ctx context.Context, sb *sandbox.Sandbox, file string) (int64, error) {
	var sbuf strings.Builder
	if _, err := b.Agent(sb).ReadFile(ctx, "/sys/fs/cgroup/"+file, limitWriter{&sbuf, 64}); err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(sbuf.String()), 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%s: %q is no count", file, sbuf.String())
	}
	return v, nil
}

func (b *Backend) cgroupValue(ctx context.Context, sb *sandbox.Sandbox, file, key string) (int64, error) {
	var sbuf strings.Builder
	if _, err := b.Agent(sb).ReadFile(ctx, "/sys/fs/cgroup/"+file, limitWriter{&sbuf, 4096}); err != nil {
		return 0, err
	}
	for _, line := range strings.Split(sbuf.String(), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", file, key)
}

// limitWriter keeps at most n bytes.
type limitWriter struct {
	w *strings.Builder
	n int
}

func (l limitWriter) Write(p []byte) (int, error) {
	if room := l.n - l.w.Len(); room < len(p) {
		l.w.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return l.w.Write(p)
}

// waitClaimGone waits until volume id's claim is gone from the API.
func (b *Backend) waitClaimGone(ctx context.Context, id string) error {
	return waitCache(ctx, b.cfg.ReadyTimeout, "waiting for claim "+claimName(id)+" to go", func() (bool, error) {
		_, err := b.client.CoreV1().PersistentVolumeClaims(b.cfg.Namespace).Get(ctx, claimName(id), metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}
