package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/bench/harness"
)

// The storage measurements of issue 4: fork of a filled persistent parent
// (i) and snapshot / restore of it (k), at each of Options.ForkSizes. The
// parents are persistent sandboxes with persist_root (the writable root
// layer lives on the workspace volume, so the volume image is the whole
// state) whose /workspace holds ForkSizes[i] of random data in files of
// about 100 KiB (10k files per GiB), written by a shell loop inside the
// sandbox and synced. Each parent is made once per run and shared by
// fork and snapshot.
//
// The peer is what a copy fallback (a pool without reflink) costs for the
// same state: `cp -a --reflink=never` of the parent's volume image file to
// the same filesystem (the storage pool), then fsync of the copy, as
// volume.CloneFile syncs its clones. It is measured once per size and
// shared by the fork and snapshot rows.

// forkFileBytes is the size of the files the parents are filled with:
// 10k files per GiB.
const forkFileBytes = (1 << 30) / 10000

// forkParent is a filled parent sandbox.
type forkParent struct {
	id    string
	size  int64
	files int
	image string  // its volume image on the host, for the copy peer
	fill  float64 // seconds the fill took
	used  int64   // volume bytes used after the fill
}

// parentReq is the request of a parent holding size bytes.
func parentReq(size int64) api.CreateSandboxRequest {
	vol := max(int64(2)<<30, (2*size+(256<<20))&^(1<<20-1))
	return api.CreateSandboxRequest{Persistent: true, PersistRoot: true, VolumeSizeBytes: vol}
}

// fillCounts returns how many files of which size hold size bytes: n-1
// files of each bytes and a last one of last bytes.
func fillCounts(size int64) (n int, each, last int64) {
	n = int(max(1, (size+forkFileBytes/2)/forkFileBytes))
	each = size / int64(n)
	last = size - each*int64(n-1)
	return n, each, last
}

// parent returns the filled parent of size bytes, making it the first time.
func (b *bench) parent(ctx context.Context, size int64) (*forkParent, error) {
	if p, ok := b.parents[size]; ok {
		return p, nil
	}
	c := b.d.C
	sb, err := c.CreateSandbox(ctx, parentReq(size))
	if err != nil {
		return nil, fmt.Errorf("creating a parent for %s: %w", harness.SizeLabel(size), err)
	}
	p := &forkParent{id: sb.ID, size: size}
	if b.parents == nil {
		b.parents = map[int64]*forkParent{}
	}
	b.parents[size] = p // deleted by dropParents, or by cleanup

	n, each, last := fillCounts(size)
	p.files = n
	b.Logf("storage: filling parent %s with %s (%d files of %d bytes)", sb.ID, harness.SizeLabel(size), n, each)
	script := fmt.Sprintf(`set -e
d=/workspace/fill
mkdir -p "$d"
i=1
while [ "$i" -lt %d ]; do
	head -c %d /dev/urandom > "$d/f$i"
	i=$((i+1))
done
head -c %d /dev/urandom > "$d/f$i"
sync`, n, each, last)
	var out strings.Builder
	t0 := time.Now()
	exit, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sh", "-c", script}}, &out, &out)
	if err != nil {
		return nil, fmt.Errorf("filling parent %s: %w", sb.ID, err)
	}
	if exit.Code != 0 {
		return nil, fmt.Errorf("filling parent %s: exit %d: %s", sb.ID, exit.Code, strings.TrimSpace(out.String()))
	}
	p.fill = time.Since(t0).Seconds()
	fi, err := c.Stat(ctx, sb.ID, fmt.Sprintf("/workspace/fill/f%d", n))
	if err != nil {
		return nil, fmt.Errorf("after the fill: %w", err)
	}
	if fi.Size != last {
		return nil, fmt.Errorf("after the fill: last file has %d bytes, want %d", fi.Size, last)
	}
	got, err := c.GetSandbox(ctx, sb.ID)
	if err != nil {
		return nil, err
	}
	if got.Storage == nil || got.Storage.ID == "" {
		return nil, fmt.Errorf("parent %s shows no workspace volume (storage)", sb.ID)
	}
	p.used = got.Storage.UsedBytes
	p.image = filepath.Join(b.tmp, "pool", "volumes", got.Storage.ID, "disk.img")
	if _, err := os.Stat(p.image); err != nil {
		return nil, fmt.Errorf("the parent's volume image: %w", err)
	}
	b.Logf("storage: filled in %.1fs; volume uses %s", p.fill, harness.SizeLabel(p.used))
	return p, nil
}

// dropParents deletes the parents (untimed).
func (b *bench) dropParents(ctx context.Context) error {
	var errs []error
	for size, p := range b.parents {
		if _, err := b.d.C.DeleteSandbox(ctx, p.id, true); err != nil {
			errs = append(errs, fmt.Errorf("delete parent %s: %w", p.id, err))
		}
		delete(b.parents, size)
	}
	return firstErr(errs...)
}

// copyPeer returns the copy-fallback samples of parent p, measuring them
// the first time: n full copies of its volume image on the same
// filesystem, each followed by fsync of the copy and removed (untimed).
func (b *bench) copyPeer(ctx context.Context, p *forkParent, n int) ([]float64, error) {
	if s, ok := b.copies[p.size]; ok {
		return s, nil
	}
	dst := filepath.Join(b.tmp, "pool", ".bench-copy.img")
	one := func() (time.Duration, error) {
		os.Remove(dst)
		t0 := time.Now()
		out, err := exec.CommandContext(ctx, "cp", "-a", "--reflink=never", "--", p.image, dst).CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("cp -a --reflink=never %s: %w: %s", p.image, err, strings.TrimSpace(string(out)))
		}
		f, err := os.Open(dst)
		if err != nil {
			return 0, err
		}
		err = f.Sync()
		f.Close()
		d := time.Since(t0)
		if rerr := os.Remove(dst); err == nil {
			err = rerr
		}
		return d, err
	}
	if _, err := one(); err != nil { // warm-up
		return nil, err
	}
	var s harness.Samples
	for range n {
		d, err := one()
		if err != nil {
			return nil, err
		}
		s.Add(d)
	}
	if b.copies == nil {
		b.copies = map[int64][]float64{}
	}
	b.copies[p.size] = s.V
	return s.V, nil
}

const copyPeerName = "cp -a --reflink=never of the volume image + fsync"

// (i) fork of a filled parent, child running.
func (b *bench) measureFork(ctx context.Context) error {
	c := b.d.C
	n := b.opts.ForkIterations
	type result struct {
		p                      *forkParent
		size                   int64
		files                  int
		fork, freeze, children harness.Samples
		peer                   []float64
	}
	var results []result
	fork := func(p *forkParent) (total, freeze time.Duration, child string, err error) {
		t0 := time.Now()
		fr, err := c.Fork(ctx, p.id, api.ForkRequest{Count: 1})
		total = time.Since(t0)
		if err != nil {
			return 0, 0, "", fmt.Errorf("fork %s: %w", p.id, err)
		}
		if len(fr.Children) != 1 {
			return 0, 0, "", fmt.Errorf("fork %s: %d children, want 1", p.id, len(fr.Children))
		}
		ch := fr.Children[0]
		if ch.State != "running" {
			c.DeleteSandbox(context.WithoutCancel(ctx), ch.ID, true)
			return 0, 0, "", fmt.Errorf("fork %s: child %s is %s", p.id, ch.ID, ch.State)
		}
		return total, time.Duration(fr.FreezeMS * float64(time.Millisecond)), ch.ID, nil
	}
	for _, size := range b.opts.ForkSizes {
		p, err := b.parent(ctx, size)
		if err != nil {
			return err
		}
		// Warm-up, untimed: the child sees the parent's files.
		_, _, child, err := fork(p)
		if err != nil {
			return err
		}
		fi, err := c.Stat(ctx, child, fmt.Sprintf("/workspace/fill/f%d", p.files))
		if _, derr := c.DeleteSandbox(ctx, child, true); err == nil && derr != nil {
			err = derr
		}
		if err != nil {
			return fmt.Errorf("the forked child of %s: %w", p.id, err)
		}
		if _, _, last := fillCounts(size); fi.Size != last {
			return fmt.Errorf("the forked child of %s: last file has %d bytes, want %d", p.id, fi.Size, last)
		}
		r := result{p: p, size: size, files: p.files}
		for i := range n {
			d, fz, child, err := fork(p)
			if err != nil {
				return err
			}
			r.fork.Add(d)
			r.freeze.Add(fz)
			r.children.Add(d - fz)
			if _, err := c.DeleteSandbox(ctx, child, true); err != nil {
				return fmt.Errorf("delete child %s: %w", child, err)
			}
			b.Every(i, n, "fork "+harness.SizeLabel(size))
		}
		b.Logf("fork %s: copy peer", harness.SizeLabel(size))
		if r.peer, err = b.copyPeer(ctx, p, n); err != nil {
			return err
		}
		results = append(results, r)
	}
	if len(results) == 0 {
		return nil
	}
	small := results[0]
	smallP50 := harness.Summarize(small.fork.V).P50
	for i, r := range results {
		peer := harness.Summarize(r.peer)
		row := Row{Measurement: Fork, Name: fmt.Sprintf("fork, parent with %s (%d files) → child running", harness.SizeLabel(r.size), r.files),
			Unit: "ms", Berth: harness.Summarize(r.fork.V), Peer: copyPeerName, PeerStat: &peer}
		var targets []string
		ok := true
		if i > 0 {
			targets = append(targets, fmt.Sprintf("≤ 2× %s", harness.SizeLabel(small.size)))
			ok = ok && row.Berth.P50 <= 2*smallP50
		}
		if i == len(results)-1 {
			targets = append(targets, "p50 ≤ 300 ms")
			ok = ok && row.Berth.P50 <= 300
		}
		if len(targets) > 0 {
			row.Target = strings.Join(targets, ", ")
			row.Pass = harness.Pass(ok)
		}
		row.Note = fmt.Sprintf("volume used %s after a %.1fs fill", harness.SizeLabel(r.p.used), r.p.fill)
		if i > 0 {
			row.Note += fmt.Sprintf("; %.2f× the %s fork p50", row.Berth.P50/smallP50, harness.SizeLabel(small.size))
		}
		b.Add(row)
		b.Add(Row{Measurement: Fork, Name: "  of which: parent frozen (capture, freeze_ms)", Unit: "ms",
			Berth: harness.Summarize(r.freeze.V)})
		b.Add(Row{Measurement: Fork, Name: "  of which: child provisioning (fork − freeze)", Unit: "ms",
			Berth: harness.Summarize(r.children.V)})
	}
	r := &b.rep.Rows[len(b.rep.Rows)-3]
	note := "parents: persistent, persist_root (writable root on the volume), volume " + harness.SizeLabel(parentReq(small.size).VolumeSizeBytes) +
		" or more; /workspace filled by a shell loop of `head -c` from /dev/urandom, then sync; fork count 1, each child deleted (untimed)"
	r.Note += "; " + note
	return nil
}

// (k) snapshot and restore of a filled parent.
func (b *bench) measureSnapshot(ctx context.Context) error {
	c := b.d.C
	n := b.opts.ForkIterations
	cycle := func(p *forkParent) (snap, restore, restart time.Duration, err error) {
		t0 := time.Now()
		sn, err := c.CreateSnapshot(ctx, p.id, api.CreateSnapshotRequest{})
		snap = time.Since(t0)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("snapshot %s: %w", p.id, err)
		}
		defer func() {
			if derr := c.DeleteSnapshot(context.WithoutCancel(ctx), sn.ID); err == nil && derr != nil {
				err = fmt.Errorf("delete snapshot %s: %w", sn.ID, derr)
			}
		}()
		t1 := time.Now()
		sb, err := c.RestoreSnapshot(ctx, sn.ID)
		restore = time.Since(t1)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("restore %s: %w", sn.ID, err)
		}
		if sb.State != "running" {
			return 0, 0, 0, fmt.Errorf("restore %s: sandbox %s is %s", sn.ID, sb.ID, sb.State)
		}
		// The peer: what restore does besides the clone, a stop → start.
		t2 := time.Now()
		if _, err := c.Stop(ctx, p.id); err != nil {
			return 0, 0, 0, fmt.Errorf("stop %s: %w", p.id, err)
		}
		st, err := c.Start(ctx, p.id)
		restart = time.Since(t2)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("start %s: %w", p.id, err)
		}
		if st.State != "running" {
			return 0, 0, 0, fmt.Errorf("start %s: state %s", p.id, st.State)
		}
		return snap, restore, restart, nil
	}
	type result struct {
		size                    int64
		files                   int
		snap, restore, restarts harness.Samples
		peer                    []float64
	}
	var results []result
	for _, size := range b.opts.ForkSizes {
		p, err := b.parent(ctx, size)
		if err != nil {
			return err
		}
		if _, _, _, err := cycle(p); err != nil { // warm-up
			return err
		}
		r := result{size: size, files: p.files}
		for i := range n {
			s, rs, rt, err := cycle(p)
			if err != nil {
				return err
			}
			r.snap.Add(s)
			r.restore.Add(rs)
			r.restarts.Add(rt)
			b.Every(i, n, "snapshot/restore "+harness.SizeLabel(size))
		}
		// Restored every time to the fill: the files are all there.
		fi, err := c.Stat(ctx, p.id, fmt.Sprintf("/workspace/fill/f%d", p.files))
		if err != nil {
			return fmt.Errorf("after %d restores: %w", n+1, err)
		}
		if _, _, last := fillCounts(size); fi.Size != last {
			return fmt.Errorf("after %d restores: last file has %d bytes, want %d", n+1, fi.Size, last)
		}
		if r.peer, err = b.copyPeer(ctx, p, n); err != nil {
			return err
		}
		results = append(results, r)
	}
	for i, r := range results {
		peer, rp := harness.Summarize(r.peer), harness.Summarize(r.restarts.V)
		row := Row{Measurement: Snapshot, Name: fmt.Sprintf("snapshot, sandbox with %s (%d files)", harness.SizeLabel(r.size), r.files),
			Unit: "ms", Berth: harness.Summarize(r.snap.V), Peer: copyPeerName, PeerStat: &peer}
		if i > 0 {
			row.Note = fmt.Sprintf("%.2f× the %s snapshot p50", row.Berth.P50/harness.Summarize(results[0].snap.V).P50, harness.SizeLabel(results[0].size))
		}
		b.Add(row)
		b.Add(Row{Measurement: Snapshot, Name: fmt.Sprintf("restore of a running sandbox, %s → running", harness.SizeLabel(r.size)),
			Unit: "ms", Berth: harness.Summarize(r.restore.V), Peer: "stop → start of the same sandbox", PeerStat: &rp})
	}
	if len(results) > 0 {
		r := &b.rep.Rows[len(b.rep.Rows)-1]
		r.Note = "restore = stop + clone of the snapshot's images + start; the peer is the stop → start alone, " +
			"measured after each restore; each snapshot is deleted after its restore (untimed)"
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
