package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/volume"
)

const (
	snapshotUpperDir        = "upper"
	snapshotVolumeImageName = "vol-%d.img"
)

func (b *Backend) snapshotDir(name string) string {
	return filepath.Join(b.pool.Root(), "snapshots", name)
}

// Capture writes a crash-consistent copy of sb's filesystem state under
// name: a reflink clone of each owned volume's image, and of the scratch
// writable layer's image when it is not on the volume. The sandbox's
// processes are frozen, and its volumes' filesystems flushed and frozen,
// only while the clones are made. The caller holds sb's lock; release
// ends its use of the capture (until then doctor leaves it alone).
func (b *Backend) Capture(ctx context.Context, sb *sandbox.Sandbox, name string) (c node.Capture, release func(), err error) {
	dir := b.snapshotDir(name)
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return c, nil, err
	}
	if _, err := os.Lstat(dir); err == nil {
		return c, nil, fmt.Errorf("capture %s exists", name)
	}
	// unmark, not the named result: every error return below sets that to
	// nil before this runs (calling it was a nil dereference: any error
	// of a capture panicked the fork or snapshot handler).
	unmark := b.markClone(dir)
	defer func() {
		if err != nil {
			unmark()
			release = nil
		}
	}()
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return c, nil, err
	}
	ok := false
	// Every freeze is undone, last first, whatever happens; a thaw that
	// fails is the capture's error (the sandbox may be left frozen), not
	// dropped. A daemon killed in between leaves the freezes to the
	// restart: volume.ThawAll for filesystems, the engine's recovery for the
	// cgroup.
	var thaws []func() error
	defer func() {
		var errs []error
		for i := len(thaws) - 1; i >= 0; i-- {
			if terr := thaws[i](); terr != nil {
				errs = append(errs, terr)
			}
		}
		if terr := errors.Join(errs...); terr != nil && err == nil {
			err = fmt.Errorf("capture of %s done, but thawing failed: %w", sb.ID, terr)
		}
		if !ok || err != nil {
			os.RemoveAll(tmp)
		}
		if ok && err != nil {
			os.RemoveAll(dir)
		}
	}()
	start := time.Now()
	if sb.State == sandbox.StateRunning {
		if err := b.rtFor(sb).Pause(ctx, sb.ID); err != nil {
			return c, nil, fmt.Errorf("freezing: %w", err)
		}
		thaws = append(thaws, func() error { return b.rtFor(sb).Resume(context.WithoutCancel(ctx), sb.ID) })
	}
	for i, vm := range sb.Spec.Volumes {
		if !vm.Owned {
			continue // named volumes belong to their owner, not to the sandbox's state
		}
		if b.volumes.Mounted(vm.VolumeID) {
			if err := b.volumes.Freeze(vm.VolumeID); err != nil {
				return c, nil, err
			}
			id := vm.VolumeID
			thaws = append(thaws, func() error { return b.volumes.Thaw(id) })
		}
		if err := failpoint.Inject("capture.frozen"); err != nil {
			return c, nil, err
		}
		if err := volume.CloneFile(b.volumes.Image(vm.VolumeID), filepath.Join(tmp, fmt.Sprintf(snapshotVolumeImageName, i))); err != nil {
			return c, nil, fmt.Errorf("cloning volume: %w", err)
		}
	}
	if err := b.captureScratch(sb, tmp); err != nil {
		return c, nil, err
	}
	c.Frozen = time.Since(start)
	if err := os.Rename(tmp, dir); err != nil {
		return c, nil, err
	}
	ok = true
	c.Name, c.SizeBytes = name, duBytes(dir)
	return c, unmark, nil
}

// Materialize lays capture name down as new sandbox sb's own files: new
// owned volumes cloned from the images, the scratch layer's image from
// its clone.
func (b *Backend) Materialize(ctx context.Context, sb *sandbox.Sandbox, name string) error {
	dir := b.snapshotDir(name)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("%w %s: %v", node.ErrNoCapture, name, err)
	}
	for i, vm := range sb.Spec.Volumes {
		if !vm.Owned {
			continue
		}
		img := filepath.Join(dir, fmt.Sprintf(snapshotVolumeImageName, i))
		if _, err := os.Stat(img); err != nil {
			return fmt.Errorf("snapshot lacks volume %d: %w", i, err)
		}
		if err := b.volumes.CreateFrom(vm.VolumeID, img); err != nil {
			return err
		}
	}
	return b.restoreScratch(sb, dir)
}

// Revert returns stopped sandbox sb's files to capture name's, in place.
func (b *Backend) Revert(ctx context.Context, sb *sandbox.Sandbox, name string) error {
	dir := b.snapshotDir(name)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("%w %s: %v", node.ErrNoCapture, name, err)
	}
	for i, vm := range sb.Spec.Volumes {
		if !vm.Owned {
			continue
		}
		img := filepath.Join(dir, fmt.Sprintf(snapshotVolumeImageName, i))
		tmp := b.volumes.Image(vm.VolumeID) + ".restore"
		os.Remove(tmp)
		if err := volume.CloneFile(img, tmp); err != nil {
			return fmt.Errorf("restoring volume: %w", err)
		}
		if err := os.Rename(tmp, b.volumes.Image(vm.VolumeID)); err != nil {
			return err
		}
	}
	return b.restoreScratch(sb, dir)
}

// DropCapture removes capture name and its data.
func (b *Backend) DropCapture(name string) error {
	if name == "" || filepath.Base(name) != name {
		return fmt.Errorf("bad capture name %q", name)
	}
	return os.RemoveAll(b.snapshotDir(name))
}

// duBytes returns the bytes allocated under dir (shared extents counted
// once per file: an upper bound of what the snapshot pins).
func duBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				if st, ok := info.Sys().(*syscall.Stat_t); ok {
					n += st.Blocks * 512
				}
			}
		}
		return nil
	})
	return n
}
