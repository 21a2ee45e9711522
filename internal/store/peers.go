package store

import "context"

// Peers records where each daemon sharing the store takes forwarded
// requests: the address of its peer listener, by node name.
type Peers interface {
	// PutPeer records (or replaces) node's peer address.
	PutPeer(ctx context.Context, node, addr string) error
	// GetPeer returns node's peer address; errdefs.ErrNotFound when the
	// node has none.
	GetPeer(ctx context.Context, node string) (string, error)
}
