package client

import (
	"context"

	"github.com/berth-sh/berth/api"
)

// Hibernate saves a running or paused sandbox's processes and memory to disk
// and releases its compute and memory; the sandbox is then stopped with
// reason "hibernated". Runtime classes that cannot checkpoint (runc) answer
// with a conflict error (IsConflict) naming the reason.
func (c *Client) Hibernate(ctx context.Context, id string) (*api.Sandbox, error) {
	return c.lifecycle(ctx, id, "hibernate")
}

// Wake restores a hibernated sandbox: its processes continue where they
// were, with their memory.
func (c *Client) Wake(ctx context.Context, id string) (*api.Sandbox, error) {
	return c.lifecycle(ctx, id, "wake")
}
