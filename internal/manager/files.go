package manager

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/overlay"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Files gives access to a running sandbox's filesystem through its agent.
// Every path resolves inside the sandbox's root; see package agent.
type Files struct {
	m  *Manager
	sb *sandbox.Sandbox
	c  *agent.Client
	// q serves reads of a quarantined (frozen) sandbox from the host side.
	q *quarantineReader
}

// Files returns file access to the sandbox ref: a running one (or, with
// auto_resume, a paused or stopped one, which is brought back first).
// write says whether the caller will change files; a quarantined sandbox
// refuses writes, and serves reads from the host side while frozen.
func (m *Manager) Files(ctx context.Context, ref string, write bool, actor string) (*Files, error) {
	sb, err := m.local(ctx, ref)
	if err != nil {
		return nil, err
	}
	if sb.State == sandbox.StateQuarantined && !write {
		return m.quarantineFiles(sb)
	}
	what := "read files of"
	if write {
		what = "write files of"
	}
	if sb, err = m.readyForUse(ctx, sb, what, actor); err != nil {
		return nil, err
	}
	m.touch(sb.ID)
	return &Files{m: m, sb: sb, c: m.agentFor(sb.ID)}, nil
}

// Sandbox returns the sandbox the files belong to.
func (f *Files) Sandbox() *sandbox.Sandbox { return f.sb }

func (f *Files) record(ctx context.Context, typ, actor, path string) {
	f.m.event(ctx, &sandbox.Event{SandboxID: f.sb.ID, Type: typ, Actor: actor,
		Cause: sandbox.CauseUser, Outcome: "ok", Message: path})
}

// reader returns the agent to read path from, and the path as it sees it.
func (f *Files) reader(ctx context.Context, path string) (*agent.Client, string, error) {
	if f.q == nil {
		return f.c, path, nil
	}
	return f.q.client(ctx, path)
}

func (f *Files) Stat(ctx context.Context, path string) (api.FileInfo, error) {
	c, p, err := f.reader(ctx, path)
	if err != nil {
		return api.FileInfo{}, err
	}
	fi, err := c.Stat(ctx, p)
	return apiFileInfo(fi), err
}

func (f *Files) List(ctx context.Context, path string) ([]api.FileInfo, error) {
	c, p, err := f.reader(ctx, path)
	if err != nil {
		return nil, err
	}
	fis, err := c.List(ctx, p)
	return apiFileInfos(fis), err
}

func (f *Files) ReadFile(ctx context.Context, path string, w io.Writer) (api.FileInfo, error) {
	c, p, err := f.reader(ctx, path)
	if err != nil {
		return api.FileInfo{}, err
	}
	fi, err := c.ReadFile(ctx, p, w)
	return apiFileInfo(fi), err
}

func (f *Files) ReadTar(ctx context.Context, path string, w io.Writer) error {
	c, p, err := f.reader(ctx, path)
	if err != nil {
		return err
	}
	return c.ReadTar(ctx, p, w)
}

// Close releases what the Files holds (the host-side reader of a
// quarantined sandbox).
func (f *Files) Close() {
	if f.q != nil {
		f.q.close()
	}
}

func (f *Files) writable() error {
	if f.q != nil {
		return errdefs.Conflict("sandbox %s is quarantined: writes are refused", f.sb.ID)
	}
	return nil
}

func (f *Files) WriteFile(ctx context.Context, path string, mode os.FileMode, r io.Reader, actor string) (api.FileInfo, error) {
	if err := f.writable(); err != nil {
		return api.FileInfo{}, err
	}
	fi, err := f.c.WriteFile(ctx, path, mode, r)
	if err == nil {
		f.record(ctx, "files.write", actor, path)
	}
	return apiFileInfo(fi), err
}

func (f *Files) WriteTar(ctx context.Context, dir string, r io.Reader, actor string) error {
	if err := f.writable(); err != nil {
		return err
	}
	err := f.c.WriteTar(ctx, dir, r)
	if err == nil {
		f.record(ctx, "files.write_tar", actor, dir)
	}
	return err
}

func (f *Files) Mkdir(ctx context.Context, path string, mode os.FileMode, parents bool, actor string) error {
	if err := f.writable(); err != nil {
		return err
	}
	err := f.c.Mkdir(ctx, path, mode, parents)
	if err == nil {
		f.record(ctx, "files.mkdir", actor, path)
	}
	return err
}

func (f *Files) Remove(ctx context.Context, path string, recursive bool, actor string) error {
	if err := f.writable(); err != nil {
		return err
	}
	err := f.c.Remove(ctx, path, recursive)
	if err == nil {
		f.record(ctx, "files.remove", actor, path)
	}
	return err
}

// quarantineReader serves read-only file access to a quarantined sandbox
// whose processes are frozen (or gone): an agent server runs inside the
// daemon, confined with openat2(RESOLVE_IN_ROOT) to the sandbox's root
// filesystem as mounted on the host, or to a volume's data for paths under
// a volume. Nothing in the sandbox runs to serve the request.
type quarantineReader struct {
	m       *Manager
	sb      *sandbox.Sandbox
	dir     string
	cancels []context.CancelFunc
	waits   []chan struct{}
}

func (m *Manager) quarantineFiles(sb *sandbox.Sandbox) (*Files, error) {
	if mounted, _ := overlay.Mounted(m.paths(sb.ID).rootfs); !mounted {
		return nil, errdefs.Conflict("sandbox %s is quarantined and stopped: its root is not mounted; release and start it to read files", sb.ID)
	}
	dir, err := os.MkdirTemp(m.paths(sb.ID).dir, "q-")
	if err != nil {
		return nil, err
	}
	return &Files{m: m, sb: sb, q: &quarantineReader{m: m, sb: sb, dir: dir}}, nil
}

func (q *quarantineReader) client(ctx context.Context, path string) (*agent.Client, string, error) {
	root := q.m.paths(q.sb.ID).rootfs
	clean := filepath.Clean("/" + path)
	for _, vm := range q.sb.Spec.Volumes {
		if rel, ok := strings.CutPrefix(clean, vm.Path); ok && (rel == "" || rel[0] == '/') {
			root = filepath.Join(q.m.volumes.Path(vm.VolumeID), volumeDataDir)
			clean = "/" + strings.TrimPrefix(rel, "/")
			break
		}
	}
	sock := filepath.Join(q.dir, fmt.Sprintf("r%d.sock", len(q.cancels)))
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := agent.Serve(sctx, agent.Config{Socket: sock, Root: root, Logger: q.m.log}); err != nil {
			q.m.log.Warn("quarantine reader", "sandbox", q.sb.ID, "err", err)
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

func (q *quarantineReader) close() {
	for i, c := range q.cancels {
		c()
		<-q.waits[i]
	}
	os.RemoveAll(q.dir)
}
