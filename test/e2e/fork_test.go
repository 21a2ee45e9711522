package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

func TestForkChildrenAreIsolated(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	parent, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "parent", Persistent: true, PersistRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, d, parent.ID, "sh", "-c", "echo v1 > /workspace/state; echo rootv1 > /etc/rootstate; sleep 1000 >/dev/null 2>&1 &")
	// Eight children at once from one parent.
	resp, err := d.c.Fork(ctx, parent.ID, api.ForkRequest{Count: 8, NamePrefix: "kid"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Children) != 8 {
		t.Fatalf("%d children", len(resp.Children))
	}
	// The parent kept running and keeps its processes.
	if out := execOut(t, d, parent.ID, "pgrep", "-c", "sleep"); out != "1\n" {
		t.Fatalf("parent lost its processes: %q", out)
	}
	execOut(t, d, parent.ID, "sh", "-c", "echo v2 > /workspace/state; echo after > /workspace/parent-only")
	var wg sync.WaitGroup
	for i, c := range resp.Children {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.Lineage == nil || c.Lineage.Parent != parent.ID || c.Persistent {
				t.Errorf("child %d: lineage %+v persistent %v", i, c.Lineage, c.Persistent)
			}
			// A child sees the parent's files as of the fork...
			out := execOut(t, d, c.ID, "sh", "-c", "cat /workspace/state /etc/rootstate; test -e /workspace/parent-only && echo leaked || true")
			if out != "v1\nrootv1\n" {
				t.Errorf("child %d sees %q", i, out)
			}
			// ...and its writes are its own.
			execOut(t, d, c.ID, "sh", "-c", fmt.Sprintf("echo child%d > /workspace/state; rm /etc/rootstate", i))
		}()
	}
	wg.Wait()
	if out := execOut(t, d, parent.ID, "cat", "/workspace/state", "/etc/rootstate"); out != "v2\nrootv1\n" {
		t.Fatalf("child writes reached the parent: %q", out)
	}
	for i, c := range resp.Children {
		if out := execOut(t, d, c.ID, "cat", "/workspace/state"); out != fmt.Sprintf("child%d\n", i) {
			t.Fatalf("child %d sees a sibling's write: %q", i, out)
		}
	}
	got, _ := d.c.GetSandbox(ctx, parent.ID)
	if got.Lineage == nil || len(got.Lineage.Children) != 8 {
		t.Fatalf("parent lineage: %+v", got.Lineage)
	}
	// cp and export move exactly the paths asked; a directory copied to a
	// missing path becomes that path, as with docker cp.
	kid := resp.Children[0].ID
	execOut(t, d, kid, "sh", "-c", "mkdir -p /workspace/out/sub && echo artefact > /workspace/out/sub/a && echo noise > /workspace/noise")
	if err := d.c.Copy(ctx, api.CopyRequest{From: kid, FromPath: "/workspace/out", To: parent.ID, ToPath: "/workspace/review"}); err != nil {
		t.Fatal(err)
	}
	if out := execOut(t, d, parent.ID, "sh", "-c", "cat /workspace/review/sub/a; ls /workspace/review"); out != "artefact\nsub\n" {
		t.Fatalf("cp between sandboxes: %q", out)
	}
	var buf bytes.Buffer
	if err := d.c.Export(ctx, kid, []string{"/workspace/out/sub/a", "/etc/hosts"}, &buf); err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "etc/hosts,workspace/out/sub/a" {
		t.Fatalf("export gave %v", names)
	}
	// Children are ephemeral: deleting them removes their data; the parent
	// is unaffected.
	for _, c := range resp.Children {
		if _, err := d.c.DeleteSandbox(ctx, c.ID, true); err != nil {
			t.Fatal(err)
		}
	}
	if out := execOut(t, d, parent.ID, "cat", "/workspace/state"); out != "v2\n" {
		t.Fatalf("parent after children deleted: %q", out)
	}
}

func TestSnapshotRestoreAndSurvival(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "snappy", Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, d, sb.ID, "sh", "-c", "head -c 3000000 /dev/urandom > /workspace/blob; echo one > /etc/state; sha256sum /workspace/blob /etc/state > /root/sums")
	sums := execOut(t, d, sb.ID, "cat", "/root/sums")
	snap, err := d.c.CreateSnapshot(ctx, sb.ID, api.CreateSnapshotRequest{Name: "before"})
	if err != nil {
		t.Fatal(err)
	}
	if snap.SandboxID != sb.ID || snap.SizeBytes == 0 {
		t.Fatalf("snapshot: %+v", snap)
	}
	// More writes, then restore: the snapshot's content comes back byte for byte.
	execOut(t, d, sb.ID, "sh", "-c", "head -c 1000 /dev/urandom > /workspace/blob; echo two > /etc/state; echo new > /workspace/new")
	restored, err := d.c.RestoreSnapshot(ctx, snap.ID)
	if err != nil || restored.State != "running" {
		t.Fatalf("restore: %+v %v", restored, err)
	}
	if out := execOut(t, d, sb.ID, "sh", "-c", "sha256sum /workspace/blob /etc/state; test -e /workspace/new && echo new-survived || true"); out != sums {
		t.Fatalf("after restore:\n%s\nwant:\n%s", out, sums)
	}
	// Names are unique; the per-sandbox list shows it.
	if _, err := d.c.CreateSnapshot(ctx, sb.ID, api.CreateSnapshotRequest{Name: "before"}); !client.IsConflict(err) {
		t.Fatalf("duplicate snapshot name: %v", err)
	}
	// A snapshot survives the deletion of its sandbox, and a new sandbox
	// starts from it.
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	again, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Snapshot: "before"})
	if err != nil {
		t.Fatal(err)
	}
	if out := execOut(t, d, again.ID, "sha256sum", "/workspace/blob", "/etc/state"); out != sums {
		t.Fatalf("sandbox from snapshot:\n%s", out)
	}
	if again.Lineage == nil || again.Lineage.FromSnapshot != snap.ID {
		t.Fatalf("lineage: %+v", again.Lineage)
	}
	if err := d.c.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.GetSnapshot(ctx, snap.ID); !client.IsNotFound(err) {
		t.Fatalf("deleted snapshot: %v", err)
	}
}
