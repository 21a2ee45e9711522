package volume

import (
	"log/slog"
	"time"

	"github.com/berth-sh/berth/internal/overlay"
)

// thawAllTimeout bounds the whole thaw pass at start: the API must come up
// whatever state the host is in.
const thawAllTimeout = 3 * time.Second

// ThawAll thaws (FITHAW) every filesystem mounted under root, the storage pool:
// a fork or snapshot freezes a sandbox's volumes (FIFREEZE) while it clones
// them, and a daemon killed meanwhile leaves them frozen, so that the next
// write there — the restart's own mkdir included — would block in the
// kernel for ever. It runs first at start, before anything touches a
// volume. FITHAW of a filesystem that is not frozen is a no-op (EINVAL).
// Opening a mount point for reading does not block on a frozen filesystem
// (atime updates are skipped, not waited for), and the pass as a whole is
// bounded: a thaw that hangs is reported, and start goes on.
func ThawAll(root string, log *slog.Logger) []string {
	done := make(chan []string, 1)
	go func() {
		var thawed []string
		mounts, err := overlay.MountsUnder(root)
		if err != nil {
			log.Warn("listing the pool's mounts to thaw them", "err", err)
		}
		for _, mp := range mounts {
			ok, err := ThawFS(mp)
			if err != nil {
				log.Warn("thawing a volume", "mount", mp, "err", err)
			}
			if ok {
				thawed = append(thawed, mp)
			}
		}
		done <- thawed
	}()
	select {
	case t := <-done:
		for _, mp := range t {
			log.Warn("thawed a volume left frozen by an interrupted fork or snapshot", "mount", mp)
		}
		return t
	case <-time.After(thawAllTimeout):
		log.Error("thawing the pool's volumes did not finish; going on", "timeout", thawAllTimeout)
		return nil
	}
}
