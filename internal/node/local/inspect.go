package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/agent/agentd"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/overlay"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Diff lists the files of sb that differ from its template: the writable
// root layer (overlay upper dir) against the template's layers, plus
// everything in its owned workspace volumes. The caller holds sb's lock.
func (b *Backend) Diff(ctx context.Context, sb *sandbox.Sandbox) ([]node.Change, error) {
	const maxEntries = 100000
	out := []node.Change{}
	add := func(e node.Change) error {
		if len(out) >= maxEntries {
			return errdefs.TooLarge("more than %d changed paths", maxEntries)
		}
		out = append(out, e)
		return nil
	}
	inLower := func(rel string) bool {
		for _, l := range sb.Spec.Layers {
			if _, err := os.Lstat(filepath.Join(b.images.LayerPath(l), rel)); err == nil {
				return true
			}
		}
		return false
	}
	upper, _ := b.layerDirs(sb)
	// So must the writable layer of a hibernated one.
	if b.scratch.Exists(sb.ID) && !b.scratch.Mounted(sb.ID) {
		if err := b.scratch.Mount(sb.ID); err == nil {
			defer b.scratch.Unmount(sb.ID)
		}
	}
	// Volumes of a stopped sandbox must be mounted to be read.
	for _, vm := range sb.Spec.Volumes {
		if vm.Owned && !b.volumes.Mounted(vm.VolumeID) {
			if err := b.volumes.Mount(vm.VolumeID); err == nil {
				if sb.State == sandbox.StateStopped {
					defer b.volumes.Unmount(vm.VolumeID)
				}
			}
		}
	}
	err := walk(upper, func(rel string, d fs.DirEntry, info fs.FileInfo) error {
		if rel == ".berth" || strings.HasPrefix(rel, ".berth/") {
			return nil
		}
		if info.Mode()&fs.ModeCharDevice != 0 {
			if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Rdev == 0 {
				return add(node.Change{Path: "/" + rel, Kind: "removed"})
			}
		}
		existed := inLower(rel)
		if info.IsDir() {
			if existed {
				return nil // contents are listed one by one
			}
			return add(node.Change{Path: "/" + rel, Kind: "added", Dir: true})
		}
		kind := "added"
		if existed {
			kind = "changed"
		}
		return add(node.Change{Path: "/" + rel, Kind: kind, Size: info.Size()})
	})
	if err != nil {
		return nil, err
	}
	for _, vm := range sb.Spec.Volumes {
		if !vm.Owned {
			continue
		}
		err := walk(filepath.Join(b.volumes.Path(vm.VolumeID), volumeDataDir), func(rel string, d fs.DirEntry, info fs.FileInfo) error {
			return add(node.Change{Path: filepath.Join(vm.Path, rel), Kind: "added", Size: sizeOf(info), Dir: info.IsDir()})
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func sizeOf(info fs.FileInfo) int64 {
	if info.IsDir() {
		return 0
	}
	return info.Size()
}

// walk visits every entry below root (not root itself) without following
// symlinks; a missing root is empty.
func walk(root string, fn func(rel string, d fs.DirEntry, info fs.FileInfo) error) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if path == root {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		return fn(rel, d, info)
	})
}

// quarantineReader serves read-only file access to a quarantined sandbox
// whose processes are frozen (or gone): an agent server runs inside the
// daemon, confined with openat2(RESOLVE_IN_ROOT) to the sandbox's root
// filesystem as mounted on the host, or to a volume's data for paths under
// a volume. Nothing in the sandbox runs to serve the request.
type quarantineReader struct {
	b       *Backend
	sb      *sandbox.Sandbox
	dir     string
	cancels []context.CancelFunc
	waits   []chan struct{}
}

// QuarantineFiles serves reads of quarantined sb from the host side.
func (b *Backend) QuarantineFiles(ctx context.Context, sb *sandbox.Sandbox) (node.FileSource, error) {
	if mounted, _ := overlay.Mounted(b.paths(sb.ID).rootfs); !mounted {
		return nil, errdefs.Conflict("sandbox %s is quarantined and stopped: its root is not mounted; release and start it to read files", sb.ID)
	}
	dir, err := os.MkdirTemp(b.paths(sb.ID).dir, "q-")
	if err != nil {
		return nil, err
	}
	return &quarantineReader{b: b, sb: sb, dir: dir}, nil
}

func (q *quarantineReader) Client(ctx context.Context, path string) (*agent.Client, string, error) {
	root := q.b.paths(q.sb.ID).rootfs
	clean := filepath.Clean("/" + path)
	for _, vm := range q.sb.Spec.Volumes {
		if rel, ok := strings.CutPrefix(clean, vm.Path); ok && (rel == "" || rel[0] == '/') {
			root = filepath.Join(q.b.volumes.Path(vm.VolumeID), volumeDataDir)
			clean = "/" + strings.TrimPrefix(rel, "/")
			break
		}
	}
	sock := filepath.Join(q.dir, fmt.Sprintf("r%d.sock", len(q.cancels)))
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := agentd.Serve(sctx, agentd.Config{Socket: sock, Root: root, Logger: q.b.log}); err != nil {
			q.b.log.Warn("quarantine reader", "sandbox", q.sb.ID, "err", err)
		}
	}()
	q.cancels = append(q.cancels, cancel)
	q.waits = append(q.waits, done)
	c := agent.NewClient(sock)
	for i := 0; ; i++ {
		if _, err := c.Ping(ctx); err == nil {
			break
		} else if i > 200 {
			return nil, "", fmt.Errorf("quarantine reader did not start: %w", err)
		}
		time.Sleep(time.Millisecond)
	}
	return c, clean, nil
}

func (q *quarantineReader) Close() {
	for i, c := range q.cancels {
		c()
		<-q.waits[i]
	}
	os.RemoveAll(q.dir)
}

// CommitLayer ends build sandbox sb's container, unmounts its root and
// stores what it wrote (its upper dir) as a new read-only layer.
func (b *Backend) CommitLayer(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
	p := b.paths(sb.ID)
	if err := b.rtFor(sb).Delete(ctx, sb.ID); err != nil {
		return "", err
	}
	if err := overlay.Unmount(p.rootfs); err != nil {
		return "", err
	}
	// Mount points the runtime made are not part of the result.
	_ = os.RemoveAll(filepath.Join(p.upper, ".berth"))
	layer, _, err := b.images.CommitDir(ctx, p.upper)
	return layer, err
}
