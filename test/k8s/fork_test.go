package k8s

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/testenv/kubeenv"
)

// TestForkThroughAPIOnRealNode drives the "both" lifecycle through the
// real `berth serve --backend kubernetes` and its HTTP API, the path a
// user takes (TestSnapshotsOnRealNode drives the backend directly): a
// persistent parent on a CSI claim, two children forked from it whose
// writes stay their own, the reviewed artefact copied back from one
// child, a snapshot, writes after it, a restore in place, a sandbox made
// from the snapshot, and at the end every sandbox and snapshot deleted
// through the API with nothing of berth's left in the cluster or in the
// CSI driver's store.
func TestForkThroughAPIOnRealNode(t *testing.T) {
	t0 := time.Now()
	c, snaps := startCSICluster(t)
	ctx := context.Background()
	const ns = sandboxNS

	b := serveOnCluster(t, c, ns, "fork", "--storage-class", kubeenv.CSIStorageClass)
	t.Logf("berth up at %v", time.Since(t0).Round(time.Millisecond))
	sh := shellIn(t, b.c)
	const listing = "cd /workspace && for f in $(find . -type f | sort); do echo $f=$(cat $f); done"

	parent, err := b.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "parent", Persistent: true, Resources: small})
	if err != nil {
		t.Fatalf("create the parent: %v", err)
	}
	sh(parent.ID, "echo v1 > /workspace/state")

	t1 := time.Now()
	fr, err := b.c.Fork(ctx, parent.ID, api.ForkRequest{Count: 2, NamePrefix: "kid"})
	if err != nil {
		dumpSnapshots(t, snaps, ns)
		t.Fatalf("fork: %v", err)
	}
	t.Logf("fork of two children answered in %v (parent frozen %.1f ms)", time.Since(t1).Round(time.Millisecond), fr.FreezeMS)
	if len(fr.Children) != 2 {
		t.Fatalf("fork made %d children, want 2", len(fr.Children))
	}
	if fr.FreezeMS != 0 {
		t.Errorf("a fork on Kubernetes freezes nothing, yet reports %.1f ms", fr.FreezeMS)
	}
	sh(parent.ID, "echo v2 > /workspace/state; echo after > /workspace/parent-only")
	var wg sync.WaitGroup
	for i, kid := range fr.Children {
		if kid.Lineage == nil || kid.Lineage.Parent != parent.ID || kid.Persistent {
			t.Errorf("child %d: lineage %+v, persistent %v; want an ephemeral child of %s", i, kid.Lineage, kid.Persistent, parent.ID)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := sh(kid.ID, listing); got != "./state=v1\n" {
				t.Errorf("child %d sees %q; want the parent's files as of the fork", i, got)
			}
			sh(kid.ID, fmt.Sprintf("echo child%d > /workspace/state; mkdir -p /workspace/out; echo artefact%d > /workspace/out/result", i, i))
		}()
	}
	wg.Wait()
	if got := sh(parent.ID, listing); got != "./parent-only=after\n./state=v2\n" {
		t.Fatalf("the parent holds %q: a child's write reached it, or its own is missing", got)
	}
	for i, kid := range fr.Children {
		want := fmt.Sprintf("./out/result=artefact%d\n./state=child%d\n", i, i)
		if got := sh(kid.ID, listing); got != want {
			t.Errorf("child %d holds %q; want %q (its own writes, no sibling's)", i, got, want)
		}
	}
	// Only the reviewed artefact comes back.
	if err := b.c.Copy(ctx, api.CopyRequest{From: fr.Children[1].ID, FromPath: "/workspace/out", To: parent.ID, ToPath: "/workspace/review"}); err != nil {
		t.Fatalf("copy the artefact back: %v", err)
	}
	if got := sh(parent.ID, listing); got != "./parent-only=after\n./review/result=artefact1\n./state=v2\n" {
		t.Errorf("after the copy the parent holds %q", got)
	}
	if got, err := b.c.GetSandbox(ctx, parent.ID); err != nil || got.Lineage == nil || len(got.Lineage.Children) != 2 {
		t.Errorf("parent's lineage: %+v %v; want two children", got, err)
	}
	for _, kid := range fr.Children {
		if _, err := b.c.DeleteSandbox(ctx, kid.ID, false); err != nil {
			t.Fatalf("delete child %s: %v", kid.ID, err)
		}
	}

	// A snapshot, writes after it, a restore in place.
	snap, err := b.c.CreateSnapshot(ctx, parent.ID, api.CreateSnapshotRequest{Name: "reviewed"})
	if err != nil {
		dumpSnapshots(t, snaps, ns)
		t.Fatalf("snapshot: %v", err)
	}
	sh(parent.ID, "echo v3 > /workspace/state; rm -r /workspace/review")
	t2 := time.Now()
	restored, err := b.c.RestoreSnapshot(ctx, snap.ID)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	t.Logf("restored in %v, sandbox %s", time.Since(t2).Round(time.Millisecond), restored.State)
	waitSandbox(t, b.c, parent.ID, 90*time.Second, "running")
	if got := sh(parent.ID, listing); got != "./parent-only=after\n./review/result=artefact1\n./state=v2\n" {
		t.Errorf("after the restore the parent holds %q; want the snapshot's files", got)
	}
	// A new sandbox from the snapshot.
	fromSnap, err := b.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "from-snapshot", Persistent: true, Snapshot: snap.ID, Resources: small})
	if err != nil {
		t.Fatalf("create from the snapshot: %v", err)
	}
	if got := sh(fromSnap.ID, listing); got != "./parent-only=after\n./review/result=artefact1\n./state=v2\n" {
		t.Errorf("the sandbox from the snapshot holds %q", got)
	}
	sh(fromSnap.ID, "echo mine > /workspace/state")
	if got := sh(parent.ID, "cat /workspace/state"); got != "v2\n" {
		t.Errorf("a write in the sandbox from the snapshot reached the parent: %q", got)
	}

	// Everything deleted through the API: nothing of berth's is left.
	for _, id := range []string{fromSnap.ID, parent.ID} {
		if _, err := b.c.DeleteSandbox(ctx, id, false); err != nil {
			t.Fatalf("delete %s: %v", id, err)
		}
	}
	if err := b.c.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatalf("delete the snapshot: %v", err)
	}
	if _, err := b.c.GetSnapshot(ctx, snap.ID); !client.IsNotFound(err) {
		t.Errorf("the deleted snapshot: %v; want not found", err)
	}
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		left := append(labelledAll(t, c, ns), snapshotLeftovers(t, c, snaps, ns)...)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left after every delete: %v", left)
		}
	}
	doctorClean(t, b.c)
	var out strings.Builder
	if _, err := b.c.Exec(ctx, parent.ID, api.ExecRequest{Cmd: []string{"/bin/true"}}, &out, io.Discard); err == nil {
		t.Errorf("exec in the deleted parent succeeded")
	}
	t.Logf("whole test %v", time.Since(t0).Round(time.Millisecond))
}
