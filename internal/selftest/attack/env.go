package attack

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// Target is the daemon under attack, as the harness knows it.
type Target struct {
	// Host is the admin client's host (for raw requests) and APIKey its key.
	Host, APIKey string
	// TCP is an http://host:port base of the daemon's TCP listener for the
	// API credential attacks ("" when Host is already TCP, or none).
	TCP string
	// E2B is an http://host:port base of the daemon's E2B door
	// (serve --e2b-listen), "" when it has none.
	E2B string
	// DataDir is the daemon's data dir on this host ("" when unknown).
	DataDir string
	// DaemonPID is the daemon's pid when known (0 otherwise).
	DaemonPID int
	// Binary is the berth executable and WorkDir a private directory of
	// the run: both set when the harness may start daemons of its own.
	Binary, WorkDir string
}

// Env is what an attack runs against: one runtime class of one daemon.
type Env struct {
	Target Target
	Class  string
	C      *client.Client
	// Raw has the admin client's host and key, for requests the SDK
	// would not send.
	Raw *RawClient
	// HostDir is a private directory on the harness's host for markers,
	// decoy sockets and secrets that must stay out of reach.
	HostDir string
	// Tag makes markers unique to this run.
	Tag string

	mu        sync.Mutex
	groups    map[string]*api.Sandbox
	sandboxes []string // every sandbox this env created, to delete at the end
}

// NewEnv makes the env of runtime class rt on the daemon c talks to. Its
// Cleanup deletes what it made.
func NewEnv(c *client.Client, t Target, rt string) (*Env, error) {
	dir, err := os.MkdirTemp("", "berth-selftest-host-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	raw, err := newRawClient(t.Host, t.APIKey)
	if err != nil {
		return nil, err
	}
	return &Env{Target: t, Class: rt, C: c, Raw: raw, HostDir: dir,
		Tag: fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff), groups: map[string]*api.Sandbox{}}, nil
}

// DataDir is the daemon's data dir ("" when unknown).
func (e *Env) DataDir() string { return e.Target.DataDir }

// Local reports whether the daemon runs on this host (so host-side checks
// of its files, processes and sockets mean something).
func (e *Env) Local() bool {
	h := e.Target.Host
	return strings.HasPrefix(h, "unix://") || strings.Contains(h, "127.0.0.1") || strings.Contains(h, "localhost")
}

// Create makes a sandbox of this env's class, to be deleted at cleanup.
func (e *Env) Create(ctx context.Context, req api.CreateSandboxRequest) (*api.Sandbox, error) {
	req.Runtime = e.Class
	if req.Labels == nil {
		req.Labels = map[string]string{}
	}
	req.Labels["berth-selftest"] = e.Tag
	if req.TimeoutSeconds == 0 {
		req.TimeoutSeconds = 900 // a crashed harness leaves nothing running for long
	}
	sb, err := e.C.CreateSandbox(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("create (%s): %w", e.Class, err)
	}
	e.mu.Lock()
	e.sandboxes = append(e.sandboxes, sb.ID)
	e.mu.Unlock()
	return sb, nil
}

// Delete deletes a sandbox this env made.
func (e *Env) Delete(ctx context.Context, id string) error {
	_, err := e.C.DeleteSandbox(ctx, id, true)
	if client.IsNotFound(err) {
		err = nil
	}
	e.mu.Lock()
	e.sandboxes = slices.DeleteFunc(e.sandboxes, func(s string) bool { return s == id })
	for g, sb := range e.groups {
		if sb.ID == id {
			delete(e.groups, g)
		}
	}
	e.mu.Unlock()
	return err
}

// Group returns the shared sandbox of an attack group, created on first
// use with the default request.
func (e *Env) Group(ctx context.Context, group string) (*api.Sandbox, error) {
	e.mu.Lock()
	sb := e.groups[group]
	e.mu.Unlock()
	if sb != nil {
		return sb, nil
	}
	sb, err := e.Create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.groups[group] = sb
	e.mu.Unlock()
	return sb, nil
}

// Shared returns the shared sandbox of group when it was already made.
func (e *Env) Shared(group string) (*api.Sandbox, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	sb, ok := e.groups[group]
	return sb, ok
}

// Track registers a sandbox made other than by Create (a raw request),
// to be deleted at cleanup.
func (e *Env) Track(id string) {
	e.mu.Lock()
	e.sandboxes = append(e.sandboxes, id)
	e.mu.Unlock()
}

// Exec runs cmd in sandbox id and returns its combined output.
func (e *Env) Exec(ctx context.Context, id string, req api.ExecRequest) (string, api.ExecExit, error) {
	if req.TimeoutSeconds == 0 {
		req.TimeoutSeconds = 60
	}
	// A hijacked agent channel may never answer: bound the call itself.
	ctx, cancel := context.WithTimeout(ctx, time.Duration(req.TimeoutSeconds*float64(time.Second))+20*time.Second)
	defer cancel()
	var out SyncBuffer
	exit, err := e.C.Exec(ctx, id, req, &out, &out)
	return out.String(), exit, err
}

// Sh runs a shell script in sandbox id.
func (e *Env) Sh(ctx context.Context, id, script string) (string, api.ExecExit, error) {
	return e.Exec(ctx, id, api.ExecRequest{Cmd: []string{"sh", "-c", script}, Env: e.scriptEnv()})
}

// Py runs a python3 program (with the prelude of helpers) in sandbox id.
func (e *Env) Py(ctx context.Context, id, code string) (string, api.ExecExit, error) {
	return e.Exec(ctx, id, api.ExecRequest{Cmd: []string{"python3", "-c", PyPrelude + code}, Env: e.scriptEnv()})
}

// scriptEnv is what attack scripts are told: the host paths they must not
// reach, the run's tag.
func (e *Env) scriptEnv() map[string]string {
	return map[string]string{"ST_DATADIR": e.Target.DataDir, "ST_HOSTDIR": e.HostDir, "ST_TAG": e.Tag}
}

// Alive reports whether sandbox id still answers an exec.
func (e *Env) Alive(ctx context.Context, id string) (bool, string) {
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, exit, err := e.Exec(cctx, id, api.ExecRequest{Cmd: []string{"echo", "alive"}, TimeoutSeconds: 15})
	if err != nil {
		return false, "exec failed: " + err.Error()
	}
	if exit.Code != 0 || !strings.Contains(out, "alive") {
		return false, fmt.Sprintf("exec answered exit %d %q", exit.Code, Clip(out, 60))
	}
	return true, "alive"
}

// Cleanup deletes every sandbox the env made and removes its host dir,
// returning what went wrong.
func (e *Env) Cleanup(ctx context.Context) []string {
	var out []string
	e.mu.Lock()
	ids := slices.Clone(e.sandboxes)
	e.mu.Unlock()
	for _, id := range ids {
		if err := e.Delete(ctx, id); err != nil {
			out = append(out, fmt.Sprintf("deleting sandbox %s: %v", id, err))
		}
	}
	if err := os.RemoveAll(e.HostDir); err != nil {
		out = append(out, err.Error())
	}
	return out
}

// SyncBuffer collects the output of an exec from both of its streams (up
// to 1 MiB; the rest is dropped).
type SyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() < 1<<20 {
		s.b.Write(p)
	}
	return len(p), nil
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
