package daemon

import (
	"context"
	"errors"
)

// Run starts the daemon and blocks until ctx is cancelled (graceful shutdown:
// running sandboxes keep running).
func Run(ctx context.Context, cfg Config) error {
	return errors.New("daemon: not wired yet")
}
