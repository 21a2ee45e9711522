// Package hostfiles reads a sandbox's files from the host side, with
// nothing in the sandbox running: the walk that lists what its writable
// layer and volumes changed against its template, and the reader that
// serves a quarantined sandbox's files through an agent server inside the
// daemon, confined to the sandbox's root as mounted on the host.
//
// It is separate from package local because it is the code that opens
// paths a sandbox wrote while the sandbox cannot answer for them: keeping
// it apart keeps its confinement (no symlink followed, openat2 in the
// agent server) reviewable on its own.
package hostfiles

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/agent/agentd"
	"github.com/berth-sh/berth/internal/node"
)

// UpperChanges lists, through add, what the overlay upper dir upper holds
// against the layers (inLower reports a path present there): whiteouts
// as removed, the rest as added or changed; berth's own mount points are
// left out.
func UpperChanges(upper string, inLower func(rel string) bool, add func(node.Change) error) error {
	return walk(upper, func(rel string, d fs.DirEntry, info fs.FileInfo) error {
		if rel == ".berth" || strings.HasPrefix(rel, ".berth/") {
			return nil
		}
		if rel == "run/secrets" && info.IsDir() && !inLower(rel) {
			// The mount point the runtime made for the secrets tmpfs
			// (what is under it in the upper dir, if anything, was
			// written without the tmpfs and is listed).
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
}

// VolumeChanges lists, through add, everything in the volume whose data
// is data, mounted in the sandbox at mountPath, as added.
func VolumeChanges(data, mountPath string, add func(node.Change) error) error {
	return walk(data, func(rel string, d fs.DirEntry, info fs.FileInfo) error {
		return add(node.Change{Path: filepath.Join(mountPath, rel), Kind: "added", Size: sizeOf(info), Dir: info.IsDir()})
	})
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

// Volume is one volume of a sandbox: where it is mounted inside, its data
// on the host and the host id range its files are stored in.
type Volume struct {
	Path, Data string
	IDs        agentd.IDShift
}

// Reader serves read-only file access to a quarantined sandbox whose
// processes are frozen (or gone): an agent server runs inside the daemon,
// confined with openat2(RESOLVE_IN_ROOT) to the sandbox's root filesystem
// as mounted on the host, or to a volume's data for paths under a volume.
// Nothing in the sandbox runs to serve the request.
type Reader struct {
	id      string
	root    string
	vols    []Volume
	ids     agentd.IDShift // the root's host id range
	dir     string
	log     *slog.Logger
	cancels []context.CancelFunc
	waits   []chan struct{}
}

// NewReader returns the reader of sandbox id, whose root is mounted at
// root with its files owned by the host id range ids; its servers'
// sockets go in dir, removed by Close. Owners are reported as the sandbox
// sees them (agentd.IDShift), never as the host's shifted ids.
func NewReader(id, root string, ids agentd.IDShift, vols []Volume, dir string, log *slog.Logger) *Reader {
	return &Reader{id: id, root: root, ids: ids, vols: vols, dir: dir, log: log}
}

// Client returns a client of a server confined to the filesystem holding
// path, and path as that server names it.
func (q *Reader) Client(ctx context.Context, path string) (*agent.Client, string, error) {
	root, ids := q.root, q.ids
	clean := filepath.Clean("/" + path)
	for _, vm := range q.vols {
		if rel, ok := strings.CutPrefix(clean, vm.Path); ok && (rel == "" || rel[0] == '/') {
			root, ids = vm.Data, vm.IDs
			clean = "/" + strings.TrimPrefix(rel, "/")
			break
		}
	}
	sock := filepath.Join(q.dir, fmt.Sprintf("r%d.sock", len(q.cancels)))
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := agentd.Serve(sctx, agentd.Config{Socket: sock, Root: root, Logger: q.log, IDs: &ids}); err != nil {
			q.log.Warn("quarantine reader", "sandbox", q.id, "err", err)
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

// Close stops the servers and removes their sockets.
func (q *Reader) Close() {
	for i, c := range q.cancels {
		c()
		<-q.waits[i]
	}
	os.RemoveAll(q.dir)
}
