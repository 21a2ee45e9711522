package manager

import (
	"context"
	"io"
	"os"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Files gives access to a running sandbox's filesystem through its agent.
// Every path resolves inside the sandbox's root; see package agent.
type Files struct {
	m  *Manager
	sb *sandbox.Sandbox
	c  *agent.Client
}

// Files returns file access to the sandbox ref if it is running.
func (m *Manager) Files(ctx context.Context, ref string) (*Files, error) {
	sb, err := m.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	if sb.State != sandbox.StateRunning {
		return nil, sandbox.ErrWrongState("access files of", sb)
	}
	return &Files{m: m, sb: sb, c: m.agentFor(sb.ID)}, nil
}

// Sandbox returns the sandbox the files belong to.
func (f *Files) Sandbox() *sandbox.Sandbox { return f.sb }

func (f *Files) record(ctx context.Context, typ, actor, path string) {
	f.m.event(ctx, &sandbox.Event{SandboxID: f.sb.ID, Type: typ, Actor: actor,
		Cause: sandbox.CauseUser, Outcome: "ok", Message: path})
}

func (f *Files) Stat(ctx context.Context, path string) (api.FileInfo, error) {
	return f.c.Stat(ctx, path)
}

func (f *Files) List(ctx context.Context, path string) ([]api.FileInfo, error) {
	return f.c.List(ctx, path)
}

func (f *Files) ReadFile(ctx context.Context, path string, w io.Writer) (api.FileInfo, error) {
	return f.c.ReadFile(ctx, path, w)
}

func (f *Files) ReadTar(ctx context.Context, path string, w io.Writer) error {
	return f.c.ReadTar(ctx, path, w)
}

func (f *Files) WriteFile(ctx context.Context, path string, mode os.FileMode, r io.Reader, actor string) (api.FileInfo, error) {
	fi, err := f.c.WriteFile(ctx, path, mode, r)
	if err == nil {
		f.record(ctx, "files.write", actor, path)
	}
	return fi, err
}

func (f *Files) WriteTar(ctx context.Context, dir string, r io.Reader, actor string) error {
	err := f.c.WriteTar(ctx, dir, r)
	if err == nil {
		f.record(ctx, "files.write_tar", actor, dir)
	}
	return err
}

func (f *Files) Mkdir(ctx context.Context, path string, mode os.FileMode, parents bool, actor string) error {
	err := f.c.Mkdir(ctx, path, mode, parents)
	if err == nil {
		f.record(ctx, "files.mkdir", actor, path)
	}
	return err
}

func (f *Files) Remove(ctx context.Context, path string, recursive bool, actor string) error {
	err := f.c.Remove(ctx, path, recursive)
	if err == nil {
		f.record(ctx, "files.remove", actor, path)
	}
	return err
}
