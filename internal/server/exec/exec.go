// Package exec serves the routes that run commands in a sandbox: the
// streamed exec (NDJSON), the one-shot run (create, exec, delete), the
// interactive exec over a WebSocket, and background processes (start,
// list, logs, attach, stdin, signal, wait). The routes are mounted by the
// root package server's route table.
package exec

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/procs"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/convert"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
)

// Engine is what the exec and process routes need of the engine.
type Engine interface {
	Get(ctx context.Context, ref string) (*sandbox.Sandbox, error)
	Create(ctx context.Context, req *engine.CreateRequest, opt engine.CreateOptions) (*sandbox.Sandbox, error)
	Delete(ctx context.Context, ref, actor string, cause sandbox.Cause, reason string) (*sandbox.Sandbox, error)
	ResolveTemplate(ctx context.Context, tenant, name string) (*store.Template, error)
	Exec(ctx context.Context, ref string, req *engine.ExecRequest, eio engine.ExecIO, actor string) (engine.Exit, error)
	StartProcess(ctx context.Context, ref string, req *procs.StartRequest, actor string) (procs.Process, error)
	ListProcesses(ctx context.Context, ref string) ([]procs.Process, error)
	AttachProcess(ctx context.Context, ref, pid string, follow bool, aio procs.AttachIO, actor string) (*engine.Exit, error)
	ProcessStdin(ctx context.Context, ref, pid string, r io.Reader, close bool, actor string) error
	SignalProcess(ctx context.Context, ref, pid, sig string, stop bool, actor string) error
	WaitProcess(ctx context.Context, ref, pid, actor string) (engine.Exit, error)
}

// Handlers serves the exec and process routes.
type Handlers struct {
	E Engine
	// Execs and ExecSeconds count and time the streamed execs; Created
	// and Deleted the sandboxes a run makes and deletes.
	Execs            prometheus.Counter
	ExecSeconds      prometheus.Observer
	Created, Deleted prometheus.Counter
	Log              func() *slog.Logger
}

func (h *Handlers) logger() *slog.Logger {
	if h.Log == nil {
		return slog.Default()
	}
	return h.Log()
}

// streamWriter turns writes into ExecEvents on one stream.
type streamWriter struct {
	nd     *rest.NDJSON
	stream string
}

func (sw streamWriter) Write(p []byte) (int, error) {
	if err := sw.nd.Send(api.ExecEvent{Stream: sw.stream, Data: p}); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Exec serves POST /v1/sandboxes/{id}/exec.
func (h *Handlers) Exec(w http.ResponseWriter, r *http.Request) {
	var req api.ExecRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	if req.TTY {
		rest.Error(w, errdefs.Invalid("tty needs the interactive exec at /exec/ws"))
		return
	}
	h.streamExec(w, r, func(ctx context.Context, eio engine.ExecIO) (engine.Exit, error) {
		return h.E.Exec(ctx, r.PathValue("id"), convert.ExecRequest(&req), eio, rest.Actor(r))
	})
}

// streamExec answers with an NDJSON exec stream. Errors before any output
// get a plain error status; once streaming, they become an error event.
func (h *Handlers) streamExec(w http.ResponseWriter, r *http.Request, run func(context.Context, engine.ExecIO) (engine.Exit, error)) {
	nd := rest.NewNDJSON(w)
	var mu sync.Mutex
	started := false
	lazy := func(stream string) streamWriter {
		return streamWriter{nd: nd, stream: stream}
	}
	eio := engine.ExecIO{Stdout: &startWriter{w: lazy("stdout"), started: &started, mu: &mu},
		Stderr: &startWriter{w: lazy("stderr"), started: &started, mu: &mu}}
	start := time.Now()
	exit, err := run(r.Context(), eio)
	h.Execs.Inc()
	h.ExecSeconds.Observe(time.Since(start).Seconds())
	mu.Lock()
	wasStarted := started
	mu.Unlock()
	if err != nil {
		if !wasStarted && nd.Err() == nil {
			rest.Error(w, err)
			return
		}
		_ = nd.Send(api.ExecEvent{Error: rest.StreamError(w, err)})
		return
	}
	ex := convert.ExitToAPI(exit)
	_ = nd.Send(api.ExecEvent{Exit: &ex})
}

// startWriter records that output has begun, so the handler knows it can
// no longer answer with an error status.
type startWriter struct {
	w       streamWriter
	started *bool
	mu      *sync.Mutex
}

func (sw *startWriter) Write(p []byte) (int, error) {
	sw.mu.Lock()
	*sw.started = true
	sw.mu.Unlock()
	return sw.w.Write(p)
}

// Run is the one-shot job: create an ephemeral sandbox, exec, stream,
// destroy — also when the client goes away mid-run.
func (h *Handlers) Run(w http.ResponseWriter, r *http.Request) {
	var req api.RunRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	if req.Exec.TTY {
		rest.Error(w, errdefs.Invalid("tty is not available for run"))
		return
	}
	if req.Sandbox.Persistent {
		rest.Error(w, errdefs.Invalid("run makes an ephemeral sandbox; use create --persistent"))
		return
	}
	// The command first: a run that cannot run anything makes nothing.
	exec := convert.ExecRequest(&req.Exec)
	if len(exec.Cmd) == 0 {
		// No command: the image's ENTRYPOINT and CMD, as docker run runs.
		t, err := h.E.ResolveTemplate(r.Context(), rest.Tenant(r), req.Sandbox.Template)
		if err != nil {
			rest.Error(w, err)
			return
		}
		if exec.Cmd = t.Config.Command(); len(exec.Cmd) == 0 {
			rest.Error(w, errdefs.Invalid("template %s names no CMD or ENTRYPOINT: give a command to run", t.Name))
			return
		}
	}
	sb, err := h.E.Create(r.Context(), convert.CreateRequest(&req.Sandbox), engine.CreateOptions{Actor: rest.Actor(r), Tenant: rest.Tenant(r), OneShot: true})
	if err != nil {
		rest.Error(w, err)
		return
	}
	h.Created.Inc()
	defer func() {
		reason := "run finished"
		if r.Context().Err() != nil {
			reason = "client went away"
		}
		if _, err := h.E.Delete(context.WithoutCancel(r.Context()), sb.ID, rest.Actor(r), sandbox.CauseClient, reason); err != nil {
			h.logger().Warn("run: destroying sandbox", "sandbox", sb.ID, "err", err)
		}
		h.Deleted.Inc()
	}()
	w.Header().Set("X-Berth-Sandbox-Id", sb.ID)
	h.streamExec(w, r, func(ctx context.Context, eio engine.ExecIO) (engine.Exit, error) {
		return h.E.Exec(ctx, sb.ID, exec, eio, rest.Actor(r))
	})
}
