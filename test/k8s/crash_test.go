package k8s

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/node/kube"
	"github.com/berth-sh/berth/internal/testenv/kubeenv"
	"github.com/berth-sh/berth/internal/testenv/pgtest"
)

// crashCaptureGrace is the replicas' --kube-capture-grace: how old an
// unrecorded capture must be before the sweep removes it (short, so the
// test need not wait the default ten minutes).
const crashCaptureGrace = 20 * time.Second

// TestReplicaDiesMidOperation: replicas of one installation (one
// PostgreSQL, one cluster with the CSI stack), where a replica that is
// not the node lease's holder dies (SIGKILL, at a failpoint) in the
// middle of a user's operation, and the holder finishes or clears what it
// left:
//   - a snapshot, between its VolumeSnapshot and its record: no record, the
//     sandbox runs on untouched, the sweep leaves the capture alone for
//     --kube-capture-grace (another replica could be about to record it)
//     and then names and removes it, with its content and the driver's copy;
//   - a pause (on Kubernetes a stop: the pod deleted, the claim kept),
//     after the pod went and before the record said stopped: the holder
//     finishes the stop once the dead replica's presence lapses;
//   - a start, after the pod runs and before the record said running: the
//     holder finishes it, adopting that pod (no second one), and the
//     files written before the pause are there.
//
// At the end the sandbox is deleted and nothing of berth's is left.
func TestReplicaDiesMidOperation(t *testing.T) {
	t0 := time.Now()
	c, snaps := startCSICluster(t)
	ctx := context.Background()
	const ns = sandboxNS
	args := append(replicaArgs(t, pgtest.Database(t)),
		"--storage-class", kubeenv.CSIStorageClass, "--kube-capture-grace", crashCaptureGrace.String())

	keeper := serveOnCluster(t, c, ns, "keeper", args...)
	waitOneHolder(t, 3*replicaLeaseTTL, keeper)
	t.Logf("keeper up and holding the node lease at %v", time.Since(t0).Round(time.Millisecond))
	sh := shellIn(t, keeper.c)
	sb, err := keeper.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "work", Persistent: true, Resources: small})
	if err != nil {
		t.Fatal(err)
	}
	sh(sb.ID, "echo kept > /workspace/state")

	// doomed starts a replica with failpoint fp, asks it for op and
	// returns when the replica is dead, which it must be.
	doomed := func(name, fp string, op func(*client.Client) error) time.Time {
		t.Helper()
		r := serveOnClusterEnv(t, c, ns, name, []string{"BERTH_FAILPOINTS=" + fp}, args...)
		err := op(r.c)
		select {
		case <-r.d.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s answered %v and is alive: failpoint %s never fired", name, err, fp)
		}
		if err == nil {
			t.Fatalf("%s answered its operation before dying at %s", name, fp)
		}
		t.Logf("%s died at %s: its client saw %v", name, fp, err)
		return time.Now()
	}

	// 1. A snapshot interrupted between its capture and its record.
	doomed("doomed-snapshot", "snapshot.after-capture", func(rc *client.Client) error {
		_, err := rc.CreateSnapshot(ctx, sb.ID, api.CreateSnapshotRequest{Name: "lost"})
		return err
	})
	if list, err := keeper.c.ListSnapshots(ctx, sb.ID); err != nil || len(list) != 0 {
		t.Fatalf("snapshots after the interrupted one: %+v %v; want none recorded", list, err)
	}
	vs := berthVolumeSnapshots(t, snaps, ns)
	if len(vs) == 0 {
		t.Fatal("no VolumeSnapshot left by the interrupted snapshot: the replica died before its capture, not after")
	}
	if got := sh(sb.ID, "cat /workspace/state"); got != "kept\n" {
		t.Errorf("the sandbox after the interrupted snapshot holds %q", got)
	}
	if age := time.Since(vs[0].CreationTimestamp.Time); age < crashCaptureGrace-5*time.Second {
		if f := captureFindings(t, keeper, false); len(f) != 0 {
			t.Errorf("the sweep names a capture %v old, inside its grace %v: %+v", age, crashCaptureGrace, f)
		}
	} else {
		t.Logf("the capture is %v old already: its grace is not checked", age)
	}
	var found []api.DoctorFinding
	for deadline := time.Now().Add(crashCaptureGrace + 30*time.Second); len(found) == 0; time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("the sweep never named the unrecorded capture %s", vs[0].Name)
		}
		found = captureFindings(t, keeper, false)
	}
	t.Logf("the sweep names it: %+v", found)
	for _, f := range captureFindings(t, keeper, true) {
		if !f.Fixed {
			t.Errorf("the sweep's fix left %+v", f)
		}
	}
	waitAll(t, 60*time.Second, func() (bool, string) {
		left := capturesLeft(t, c, snaps, ns)
		return len(left) == 0, strings.Join(left, ", ")
	})

	// 2. A pause (a stop here) interrupted after the pod went.
	killed := doomed("doomed-pause", "stop.after-node", func(rc *client.Client) error {
		_, err := rc.Pause(ctx, sb.ID)
		return err
	})
	if got, err := keeper.c.GetSandbox(ctx, sb.ID); err != nil || got.State != "stopping" {
		t.Errorf("right after the kill the record is %+v %v; want stopping", got, err)
	}
	waitSandbox(t, keeper.c, sb.ID, 3*replicaLeaseTTL+30*time.Second, "stopped")
	t.Logf("the holder finished the interrupted pause %v after the kill", time.Since(killed).Round(time.Millisecond))
	if last := lastState(t, keeper.c, sb.ID); last.To != "stopped" || last.Actor != "reconciler" {
		t.Errorf("the stop was recorded by %+v; want the reconciler", last)
	}
	if _, err := c.Client.CoreV1().Pods(ns).Get(ctx, "berth-"+sb.ID, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the stopped sandbox's pod: %v; want it gone", err)
	}
	if claims := leftIn(t, c, ns, "claims"); len(claims) != 1 {
		t.Errorf("claims of the stopped sandbox: %v; want its one workspace claim kept", claims)
	}

	// 3. A start interrupted after its pod runs.
	killed = doomed("doomed-start", "start.after-provision", func(rc *client.Client) error {
		_, err := rc.Start(ctx, sb.ID)
		return err
	})
	if got, err := keeper.c.GetSandbox(ctx, sb.ID); err != nil || got.State != "starting" {
		t.Errorf("right after the kill the record is %+v %v; want starting", got, err)
	}
	pod, err := c.Client.CoreV1().Pods(ns).Get(ctx, "berth-"+sb.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the pod the interrupted start made: %v", err)
	}
	waitSandbox(t, keeper.c, sb.ID, 3*replicaLeaseTTL+60*time.Second, "running")
	t.Logf("the holder finished the interrupted start %v after the kill", time.Since(killed).Round(time.Millisecond))
	if last := lastState(t, keeper.c, sb.ID); last.To != "running" || last.Actor != "reconciler" {
		t.Errorf("the start was recorded by %+v; want the reconciler", last)
	}
	if now, err := c.Client.CoreV1().Pods(ns).Get(ctx, "berth-"+sb.ID, metav1.GetOptions{}); err != nil || now.UID != pod.UID {
		t.Errorf("the running sandbox's pod: %v; want the one the interrupted start made, adopted (uid %s)", err, pod.UID)
	}
	if got := sh(sb.ID, "cat /workspace/state"); got != "kept\n" {
		t.Errorf("after the interrupted pause and start the sandbox holds %q", got)
	}

	// Deleted: nothing of berth's left, and nothing for the doctor.
	if _, err := keeper.c.DeleteSandbox(ctx, sb.ID, false); err != nil {
		t.Fatal(err)
	}
	waitAll(t, 90*time.Second, func() (bool, string) {
		left := append(labelledAll(t, c, ns), snapshotLeftovers(t, c, snaps, ns)...)
		return len(left) == 0, strings.Join(left, ", ")
	})
	doctorClean(t, keeper.c)
	t.Logf("whole test %v", time.Since(t0).Round(time.Millisecond))
}

// berthVolumeSnapshots lists the VolumeSnapshots berth labelled in ns.
func berthVolumeSnapshots(t *testing.T, snaps snapclient.Interface, ns string) []metav1.ObjectMeta {
	t.Helper()
	list, err := snaps.SnapshotV1().VolumeSnapshots(ns).List(context.Background(),
		metav1.ListOptions{LabelSelector: kube.LabelManagedBy + "=" + kube.ManagedBy})
	if err != nil {
		t.Fatal(err)
	}
	var out []metav1.ObjectMeta
	for _, s := range list.Items {
		out = append(out, s.ObjectMeta)
	}
	return out
}

// capturesLeft lists captures in any form: berth's VolumeSnapshots,
// every VolumeSnapshotContent, and the CSI driver's snapshot copies.
func capturesLeft(t *testing.T, c *kubeenv.Cluster, snaps snapclient.Interface, ns string) []string {
	t.Helper()
	var left []string
	for _, m := range berthVolumeSnapshots(t, snaps, ns) {
		left = append(left, "volumesnapshot "+m.Name)
	}
	vcs, err := snaps.SnapshotV1().VolumeSnapshotContents().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range vcs.Items {
		left = append(left, "volumesnapshotcontent "+s.Name)
	}
	ents, _ := os.ReadDir(filepath.Join(c.Dir, "csi", "snapshots"))
	for _, e := range ents {
		left = append(left, "driver snapshots/"+e.Name())
	}
	return left
}

// captureFindings runs r's doctor (its fix when fix) and returns its
// findings about captures.
func captureFindings(t *testing.T, r *berthReplica, fix bool) []api.DoctorFinding {
	t.Helper()
	rep, err := r.c.Doctor(context.Background(), fix)
	if err != nil {
		t.Fatalf("doctor on %s: %v", r.name, err)
	}
	var out []api.DoctorFinding
	for _, f := range rep.Findings {
		if f.Kind == "capture" {
			out = append(out, f)
		}
	}
	return out
}

// lastState is sandbox id's last state event.
func lastState(t *testing.T, c *client.Client, id string) api.Event {
	t.Helper()
	evs, err := c.Events(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var last api.Event
	for _, ev := range evs {
		if ev.Type == "state" {
			last = ev
		}
	}
	return last
}
