package local

import (
	"context"

	"github.com/berth-sh/berth/internal/node/local/space"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Capacity and admission: package space (the host filesystems and the
// reserve); here what is the backend's own (the pool's size, what a
// sandbox may still grow by, read-only filesystems).

// Capacity is the storage pool's size: the most a disk cap or volume may be.
func (b *Backend) Capacity() (int64, error) { return b.pool.Capacity() }

// Admit refuses (507) objects that may grow to need bytes, for what,
// when they cannot fit (package space).
func (b *Backend) Admit(need int64, what string, committed func() int64) error {
	return b.space.Admit(need, what, committed)
}

// ReleaseReserve frees the reserve when the host filesystem is nearly
// full, so that a delete can be recorded.
func (b *Backend) ReleaseReserve() { b.space.ReleaseReserve() }

// Committed is what sb's writable layer and owned volumes may still grow
// by: their sizes less what they hold already.
func (b *Backend) Committed(sb *sandbox.Sandbox) int64 {
	var sum int64
	if !persistsRoot(sb) {
		sum += b.diskCap(sb) - space.Allocated(b.scratch.Image(sb.ID))
	}
	for _, vm := range sb.Spec.Volumes {
		if vm.Owned {
			sum += sb.Spec.VolumeSize - space.Allocated(b.volumes.Image(vm.VolumeID))
		}
	}
	return sum
}

// watchReadOnly records, once per occurrence, that a running sandbox's
// workspace volume or writable layer went read-only (ext4 stops writes
// after an I/O error: the host disk under the pool filled, say; on
// kernels 6.x statfs does not show it, volume.ReadOnlyFS does);
// inspect shows it (read_only) and doctor reports it; a stop/start mounts
// it read-write again.
func (b *Backend) watchReadOnly(live []*sandbox.Sandbox) {
	for _, sb := range live {
		if sb.State != sandbox.StateRunning && sb.State != sandbox.StatePaused {
			continue
		}
		if sb.Spec.Pool != "" && sb.State == sandbox.StatePaused {
			// A frozen warm-pool member writes nothing and is no one's
			// yet; it is watched from its claim on (a full pool doubled
			// the tick's work, during the burst that drained it).
			continue
		}
		check := func(what string, ro bool) {
			key := sb.ID + "/" + what
			b.mu.Lock()
			seen := b.readOnly[key]
			if ro {
				b.readOnly[key] = true
			} else {
				delete(b.readOnly, key)
			}
			b.mu.Unlock()
			if ro && !seen {
				b.log.Warn("filesystem went read-only", "sandbox", sb.ID, "what", what)
				b.emit(&sandbox.Event{SandboxID: sb.ID, Type: "storage", Actor: "reconciler",
					Cause: sandbox.CauseReconciler, Outcome: "read_only",
					Message: what + " takes no more writes: the kernel made it read-only after an I/O error (a full host disk under the storage pool does this); " +
						"stop and start the sandbox once there is room to mount it read-write again"})
			}
		}
		if !persistsRoot(sb) && b.scratch.Mounted(sb.ID) {
			u, err := b.scratch.Usage(sb.ID)
			check("the writable root layer", err == nil && u.ReadOnly)
		}
		for _, vm := range sb.Spec.Volumes {
			if vm.Owned && b.volumes.Mounted(vm.VolumeID) {
				u, err := b.volumes.Usage(vm.VolumeID)
				check("volume "+vm.VolumeID, err == nil && u.ReadOnly)
			}
		}
	}
}

// Tick makes the reserve when there is room and watches the live
// sandboxes' filesystems for read-only remounts.
func (b *Backend) Tick(ctx context.Context, live []*sandbox.Sandbox) {
	b.space.EnsureReserve()
	b.watchReadOnly(live)
}
