package snapshots

import "time"

// ForkRequest asks for children of a sandbox.
type ForkRequest struct {
	Count      int // 0 = 1; at most MaxForkCount
	Persistent bool
	Timeout    time.Duration
	Labels     map[string]string
	Env        map[string]string
	NamePrefix string // children are named PREFIX-1, PREFIX-2, ...
}

// SnapshotRequest names a snapshot and how long it is kept.
type SnapshotRequest struct {
	Name      string
	Retention time.Duration // 0 = kept
}

// CopyRequest copies a path from one sandbox into a directory of another.
type CopyRequest struct {
	From     string
	FromPath string
	To       string
	ToPath   string
	// PreserveOwner keeps the source's owners (uid and gid as the
	// sandboxes see them) instead of giving the copy to the
	// destination's user.
	PreserveOwner bool
}
