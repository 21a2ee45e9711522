package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// TestIdempotentCreates: with an Idempotency-Key, a repeated create, fork
// or snapshot returns the first result and makes nothing more; another
// body with the same key is refused.
func TestIdempotentCreates(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := client.WithIdempotencyKey(context.Background(), "e2e-live")
	a, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Labels: map[string]string{"idem": "live"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Labels: map[string]string{"idem": "live"}})
	if err != nil || b.ID != a.ID {
		t.Fatalf("second create with the key: %v %v, want %s", b, err, a.ID)
	}
	_, err = d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Labels: map[string]string{"idem": "other"}})
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != 422 || ae.Code != "idempotency_key_reused" {
		t.Fatalf("other body, same key: %v", err)
	}
	if n := countLabelled(t, d, "idem", "live"); n != 1 {
		t.Fatalf("%d sandboxes for one key", n)
	}

	fctx := client.WithIdempotencyKey(context.Background(), "e2e-fork")
	f1, err := d.c.Fork(fctx, a.ID, api.ForkRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	f2, err := d.c.Fork(fctx, a.ID, api.ForkRequest{Count: 2})
	if err != nil || len(f2.Children) != 2 || f2.Children[0].ID != f1.Children[0].ID || f2.Children[1].ID != f1.Children[1].ID {
		t.Fatalf("second fork with the key: %+v %v", f2, err)
	}
	if kids := childrenOf(t, d, a.ID); kids != 2 {
		t.Fatalf("%d children after two forks with one key", kids)
	}

	sctx := client.WithIdempotencyKey(context.Background(), "e2e-snap")
	s1, err := d.c.CreateSnapshot(sctx, a.ID, api.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := d.c.CreateSnapshot(sctx, a.ID, api.CreateSnapshotRequest{})
	if err != nil || s2.ID != s1.ID {
		t.Fatalf("second snapshot with the key: %v %v", s2, err)
	}
	if sns, err := d.c.ListSnapshots(context.Background(), a.ID); err != nil || len(sns) != 1 {
		t.Fatalf("snapshots: %d %v", len(sns), err)
	}
}

// TestIdempotentCreateAcrossCrash: the daemon dies in the middle of a
// create whose client then sees an error; after the restart the
// reconciler finishes that create, and the client's retry with the same
// key gets that sandbox instead of a second one. Likewise a fork.
func TestIdempotentCreateAcrossCrash(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	for _, fp := range []string{"create.after-mount", "create.after-start"} {
		t.Run(fp, func(t *testing.T) {
			label := "idem=" + strings.ReplaceAll(fp, ".", "-")
			key := "e2e-crash-" + fp
			d.stop()
			d.startWithEnv("BERTH_FAILPOINTS=" + fp)
			if out, _, code := d.cli("create", "--idempotency-key", key, "-l", label); code == 0 {
				t.Fatalf("create succeeded although the daemon should have died: %s", out)
			}
			d.waitExit()
			d.startWithEnv()
			out, stderr, code := d.cli("create", "--idempotency-key", key, "-l", label)
			if code != 0 {
				t.Fatalf("retried create: %d %s", code, stderr)
			}
			id := strings.TrimSpace(out)
			if !strings.Contains(d.logs.String(), "taking over an interrupted idempotent request") {
				t.Fatal("the retry did not resume the interrupted create's key")
			}
			again, _, _ := d.cli("create", "--idempotency-key", key, "-l", label)
			if strings.TrimSpace(again) != id {
				t.Fatalf("third create gave %q, want %s", again, id)
			}
			sb, err := d.c.GetSandbox(context.Background(), id)
			if err != nil || sb.State != "running" {
				t.Fatalf("the one sandbox: %+v %v", sb, err)
			}
			if out := execOut(t, d, id, "echo", "ok"); out != "ok\n" {
				t.Fatalf("exec: %q", out)
			}
			k, v, _ := strings.Cut(label, "=")
			if n := countLabelled(t, d, k, v); n != 1 {
				t.Fatalf("berth ls shows %d sandboxes for one key", n)
			}
			assertDoctorClean(t, d)
		})
	}
	t.Run("fork", func(t *testing.T) {
		ctx := context.Background()
		d.stop()
		d.startWithEnv()
		parent, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		d.stop()
		d.startWithEnv("BERTH_FAILPOINTS=create.after-start")
		fctx := client.WithIdempotencyKey(ctx, "e2e-crash-fork")
		if _, err := d.c.Fork(fctx, parent.ID, api.ForkRequest{Count: 2}); err == nil {
			t.Fatal("fork succeeded although the daemon should have died")
		}
		d.waitExit()
		d.startWithEnv()
		fr, err := d.c.Fork(fctx, parent.ID, api.ForkRequest{Count: 2})
		if err != nil || len(fr.Children) == 0 {
			t.Fatalf("retried fork: %+v %v", fr, err)
		}
		for _, k := range fr.Children {
			if k.State != "running" {
				t.Fatalf("child %s is %s", k.ID, k.State)
			}
		}
		if n := childrenOf(t, d, parent.ID); n != len(fr.Children) {
			t.Fatalf("%d children, the retry answered %d", n, len(fr.Children))
		}
		assertDoctorClean(t, d)
	})
}

// countLabelled counts, through berth ls, the sandboxes labelled k=v.
func countLabelled(t *testing.T, d *daemon, k, v string) int {
	t.Helper()
	out, stderr, code := d.cli("ls", "-o", "json")
	if code != 0 {
		t.Fatalf("berth ls: %s", stderr)
	}
	var sbs []api.Sandbox
	jsonDecode(t, out, &sbs)
	n := 0
	for _, sb := range sbs {
		if sb.Labels[k] == v {
			n++
		}
	}
	return n
}

func childrenOf(t *testing.T, d *daemon, parent string) int {
	t.Helper()
	sbs, err := d.c.ListSandboxes(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, sb := range sbs {
		if sb.Lineage != nil && sb.Lineage.Parent == parent {
			n++
		}
	}
	return n
}

// TestIdempotentPoolClaim: a keyed create served from the warm pool
// records the member's id (not the one chosen beforehand), so the
// replay names the claimed sandbox.
func TestIdempotentPoolClaim(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	if _, err := d.c.SetPool(ctx, "base", 1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if p, err := d.c.GetPool(ctx, "base"); err == nil && p.Ready >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("pool not filled")
		}
		time.Sleep(50 * time.Millisecond)
	}
	kctx := client.WithIdempotencyKey(ctx, "e2e-pool")
	a, err := d.c.CreateSandbox(kctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := d.c.GetPool(ctx, "base"); err != nil || p.Hits != 1 {
		t.Fatalf("the create was not served by the pool: %+v %v", p, err)
	}
	b, err := d.c.CreateSandbox(kctx, api.CreateSandboxRequest{})
	if err != nil || b.ID != a.ID {
		t.Fatalf("replay of a pool claim: %v %v, want %s", b, err, a.ID)
	}
	if _, err := d.c.GetSandbox(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
}
