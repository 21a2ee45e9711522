// Package files is file access to sandboxes over the engine's core: a
// running sandbox's files through its agent (every path resolved inside
// its root), a quarantined one's read from outside it, writes recorded as
// events. Export, copy and template builds use it too.
//
// Ownership: what a user's write, copy or mkdir creates (the files API's
// PUT and mkdir, berth cp in either form) belongs to the request's user, else the
// sandbox's (Spec.User: create --user, else the template's USER), else
// root, resolved by the agent against the sandbox's own /etc/passwd, so
// a non-root sandbox's processes can change what was copied in; with
// preserve_owner (a tar, cp -a) each entry keeps the archive's uid and
// gid, as the sandbox sees ids. Directories an extraction makes on the
// way belong to the owner too; a copy into a missing directory makes it
// from the archive, so it is the owner's. The engine's own writes
// (template builds: COPY is root's, as in Docker) use WriteFile and
// WriteTar, root's.
package files

import (
	"context"
	"io"
	"os"
	pathpkg "path"
	"strings"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Access opens sandboxes' files.
type Access struct{ e engine.Host }

// New returns file access over e.
func New(e engine.Host) *Access { return &Access{e: e} }

// Files gives access to a running sandbox's filesystem through its agent.
// Every path resolves inside the sandbox's root; see package agent.
type Files struct {
	m  engine.Host
	sb *sandbox.Sandbox
	c  *agent.Client
	// q serves reads of a quarantined (frozen) sandbox from outside it.
	q node.FileSource
}

// Files returns file access to the sandbox ref: a running one (or, with
// auto_resume, a paused or stopped one, which is brought back first).
// write says whether the caller will change files; a quarantined sandbox
// refuses writes, and serves reads from the host side while frozen.
func (a *Access) Files(ctx context.Context, ref string, write bool, actor string) (*Files, error) {
	m := a.e
	sb, err := m.Local(ctx, ref)
	if err != nil {
		return nil, err
	}
	if sb.State == sandbox.StateQuarantined && !write {
		rl, err := node.Need[node.RootLayer](m.Backend(), node.OpQuarantine)
		if err != nil {
			return nil, err
		}
		q, err := rl.QuarantineFiles(ctx, sb)
		if err != nil {
			return nil, err
		}
		return &Files{m: m, sb: sb, q: q}, nil
	}
	what := "read files of"
	if write {
		what = "write files of"
	}
	if sb, err = m.ReadyForUse(ctx, sb, what, actor); err != nil {
		return nil, err
	}
	m.Touched(sb.ID)
	return &Files{m: m, sb: sb, c: m.Backend().Agent(sb)}, nil
}

// Sandbox returns the sandbox the files belong to.
func (f *Files) Sandbox() *sandbox.Sandbox { return f.sb }

func (f *Files) record(ctx context.Context, typ, actor, path string) {
	f.m.Event(ctx, &sandbox.Event{SandboxID: f.sb.ID, Type: typ, Actor: actor,
		Cause: sandbox.CauseUser, Outcome: "ok", Message: path})
}

// reader returns the agent to read path from, and the path as it sees it.
func (f *Files) reader(ctx context.Context, path string) (*agent.Client, string, error) {
	if f.q == nil {
		return f.c, path, nil
	}
	return f.q.Client(ctx, path)
}

func (f *Files) Stat(ctx context.Context, path string) (engine.FileInfo, error) {
	c, p, err := f.reader(ctx, path)
	if err != nil {
		return engine.FileInfo{}, err
	}
	fi, err := c.Stat(ctx, p)
	return engine.FileInfoOf(fi), err
}

func (f *Files) List(ctx context.Context, path string) ([]engine.FileInfo, error) {
	c, p, err := f.reader(ctx, path)
	if err != nil {
		return nil, err
	}
	fis, err := c.List(ctx, p)
	return engine.FileInfosOf(fis), err
}

func (f *Files) ReadFile(ctx context.Context, path string, w io.Writer) (engine.FileInfo, error) {
	c, p, err := f.reader(ctx, path)
	if err != nil {
		return engine.FileInfo{}, err
	}
	fi, err := c.ReadFile(ctx, p, w)
	return engine.FileInfoOf(fi), err
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
		f.q.Close()
	}
}

func (f *Files) writable() error {
	if f.q != nil {
		return errdefs.Conflict("sandbox %s is quarantined: writes are refused", f.sb.ID)
	}
	return nil
}

// Ownership says who owns what a write creates (agent.Ownership): a
// user's copies and writes are owned by the request's user, else the
// sandbox's (Owner), with Preserve (tar) by the archive's owners; the
// engine's own writes (template builds) by root.
type Ownership = agent.Ownership

// Owner is who owns the files a user's write creates: user (the
// request's), else the sandbox's user; "" is root.
func (f *Files) Owner(user string) string {
	if user != "" {
		return user
	}
	return f.sb.Spec.User
}

// WriteFile writes path as root, as the engine's own writes are.
func (f *Files) WriteFile(ctx context.Context, path string, mode os.FileMode, r io.Reader, actor string) (engine.FileInfo, error) {
	return f.WriteFileAs(ctx, path, mode, r, Ownership{}, actor)
}

// WriteFileAs writes path owned as o says.
func (f *Files) WriteFileAs(ctx context.Context, path string, mode os.FileMode, r io.Reader, o Ownership, actor string) (engine.FileInfo, error) {
	if err := f.writable(); err != nil {
		return engine.FileInfo{}, err
	}
	fi, err := f.c.WriteFileAs(ctx, path, mode, r, o)
	if err == nil {
		f.record(ctx, "files.write", actor, path)
	}
	return engine.FileInfoOf(fi), err
}

// WriteTar extracts r into dir as root, as the engine's own writes are.
func (f *Files) WriteTar(ctx context.Context, dir string, r io.Reader, actor string) error {
	return f.WriteTarAs(ctx, dir, r, Ownership{}, actor)
}

// WriteTarAs extracts r into dir, what it creates owned as o says.
func (f *Files) WriteTarAs(ctx context.Context, dir string, r io.Reader, o Ownership, actor string) error {
	if err := f.writable(); err != nil {
		return err
	}
	err := f.c.WriteTarAs(ctx, dir, r, o)
	if err == nil {
		f.record(ctx, "files.write_tar", actor, dir)
	}
	return err
}

// Mkdir makes path (with parents, the missing ones too) as root, as the
// engine's own writes are.
func (f *Files) Mkdir(ctx context.Context, path string, mode os.FileMode, parents bool, actor string) error {
	return f.MkdirAs(ctx, path, mode, parents, "", actor)
}

// MkdirAs makes path, what it creates owned by owner (Owner: a user's
// mkdir is the sandbox's user's; "" is root).
func (f *Files) MkdirAs(ctx context.Context, path string, mode os.FileMode, parents bool, owner, actor string) error {
	if err := f.writable(); err != nil {
		return err
	}
	err := f.c.MkdirAs(ctx, path, mode, parents, owner)
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

// Move renames src to dst inside the sandbox by rename(2)'s rules (see
// the agent's rootfs.Root.Move); with noReplace an existing dst is a
// conflict.
func (f *Files) Move(ctx context.Context, src, dst string, noReplace bool, actor string) error {
	if err := f.writable(); err != nil {
		return err
	}
	err := f.c.Move(ctx, src, dst, noReplace)
	if err == nil {
		f.record(ctx, "files.move", actor, src+" -> "+dst)
	}
	return err
}

// WatchEvent is one change under a watched directory: Type is create,
// write, remove, rename (OldPath → Path) or overflow (events lost).
type WatchEvent struct {
	Type, Path, OldPath string
	IsDir               bool
}

// Watch streams the changes under the directory path (its subtree with
// recursive) to each until ctx ends or each fails (nil then, or each's
// error), the directory goes away (nil), or an error. ready is called once
// the directory is watched. A quarantined sandbox is watched from the host
// side (its files do not change while it is frozen).
func (f *Files) Watch(ctx context.Context, path string, recursive bool, ready func(), each func(WatchEvent) error) error {
	c, p, err := f.reader(ctx, path)
	if err != nil {
		return err
	}
	// Events name paths as the serving agent sees them: under a volume
	// the host-side reader's root is the volume's.
	var prefix string
	if cp := pathpkg.Clean(path); f.q != nil && cp != p {
		prefix = strings.TrimSuffix(cp, strings.TrimSuffix(p, "/"))
	}
	return c.Watch(ctx, p, recursive, ready, func(ev agent.WatchEvent) error {
		out := WatchEvent{Type: ev.Type, Path: ev.Path, OldPath: ev.OldPath, IsDir: ev.IsDir}
		if prefix != "" && out.Path != "" {
			out.Path = prefix + out.Path
			if out.OldPath != "" {
				out.OldPath = prefix + out.OldPath
			}
		}
		return each(out)
	})
}
