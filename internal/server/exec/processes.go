package exec

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/engine/procs"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/server/convert"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
)

// Background processes: /v1/sandboxes/{id}/processes (engine/procs).

// maxProcStdin caps one POST .../stdin body.
const maxProcStdin = 64 << 20

func processToAPI(p procs.Process) api.Process {
	out := api.Process{ID: p.ID, Tag: p.Tag, Argv: p.Argv, TTY: p.TTY, PID: p.PID, Started: p.Started,
		State: p.State, Restart: p.Restart, Restarts: p.Restarts, Reason: p.Reason}
	if out.Argv == nil {
		out.Argv = []string{}
	}
	if p.Exit != nil {
		ex := convert.ExitToAPI(*p.Exit)
		out.Exit = &ex
	}
	return out
}

// StartProcess serves POST /v1/sandboxes/{id}/processes.
func (h *Handlers) StartProcess(w http.ResponseWriter, r *http.Request) {
	var req api.StartProcessRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	p, err := h.E.StartProcess(r.Context(), r.PathValue("id"), input.StartRequest(&req), rest.Actor(r))
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, http.StatusCreated, processToAPI(p))
}

// ListProcesses serves GET /v1/sandboxes/{id}/processes.
func (h *Handlers) ListProcesses(w http.ResponseWriter, r *http.Request) {
	ps, err := h.E.ListProcesses(r.Context(), r.PathValue("id"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	out := api.ProcessList{Processes: make([]api.Process, 0, len(ps))}
	for _, p := range ps {
		out.Processes = append(out.Processes, processToAPI(p))
	}
	rest.JSON(w, 200, out)
}

// GetProcess answers the process pid names: by id, or the running (else
// the newest) process with that tag.
func (h *Handlers) GetProcess(w http.ResponseWriter, r *http.Request) {
	p, err := h.findProcess(r.Context(), r.PathValue("id"), r.PathValue("pid"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, processToAPI(*p))
}

// findProcess is the process of sandbox id that pid names: by id, or the
// running (else the newest) process with that tag.
func (h *Handlers) findProcess(ctx context.Context, id, pid string) (*procs.Process, error) {
	ps, err := h.E.ListProcesses(ctx, id)
	if err != nil {
		return nil, err
	}
	var found *procs.Process
	for i := len(ps) - 1; i >= 0; i-- {
		p := ps[i]
		if p.ID == pid {
			found = &ps[i]
			break
		}
		if p.Tag == pid && (found == nil || (found.State != "running" && p.State == "running")) {
			found = &ps[i]
		}
	}
	if found == nil {
		return nil, errdefs.NotFound("no process %q", pid)
	}
	return found, nil
}

// ProcessLogs streams the kept output and, with ?follow=1, the live
// output, as NDJSON ProcessEvents.
func (h *Handlers) ProcessLogs(w http.ResponseWriter, r *http.Request) {
	follow, err := boolQuery(r, "follow")
	if err != nil {
		rest.Error(w, err)
		return
	}
	nd := rest.NewNDJSON(w)
	var mu sync.Mutex
	started := false
	send := func(ev api.ProcessEvent) error {
		mu.Lock()
		started = true
		mu.Unlock()
		return nd.Send(ev)
	}
	ex, err := h.E.AttachProcess(r.Context(), r.PathValue("id"), r.PathValue("pid"), follow, procs.AttachIO{
		Stdout: eventWriter{"stdout", send}, Stderr: eventWriter{"stderr", send},
		Gap: func(n int64) { _ = send(api.ProcessEvent{Gap: n}) },
	}, rest.Actor(r))
	mu.Lock()
	wasStarted := started
	mu.Unlock()
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		if !wasStarted {
			rest.Error(w, err)
			return
		}
		_ = nd.Send(api.ProcessEvent{Error: rest.StreamError(w, err)})
		return
	}
	if !wasStarted {
		w.WriteHeader(http.StatusOK)
	}
	if ex != nil {
		e := convert.ExitToAPI(*ex)
		_ = nd.Send(api.ProcessEvent{Exit: &e})
	}
}

type eventWriter struct {
	stream string
	send   func(api.ProcessEvent) error
}

func (e eventWriter) Write(p []byte) (int, error) {
	if err := e.send(api.ProcessEvent{Stream: e.stream, Data: p}); err != nil {
		return 0, err
	}
	return len(p), nil
}

func boolQuery(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errdefs.Invalid("%s=%q is not a boolean", name, v)
	}
	return b, nil
}

// ProcessStdin copies the body to the process's stdin; ?close=1 closes
// it after.
func (h *Handlers) ProcessStdin(w http.ResponseWriter, r *http.Request) {
	closeIt, err := boolQuery(r, "close")
	if err != nil {
		rest.Error(w, err)
		return
	}
	body := http.MaxBytesReader(w, r.Body, maxProcStdin)
	if err := h.E.ProcessStdin(r.Context(), r.PathValue("id"), r.PathValue("pid"), body, closeIt, rest.Actor(r)); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = errdefs.TooLarge("stdin exceeds %d bytes per request", maxProcStdin)
		}
		rest.Error(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// SignalProcess serves POST /v1/sandboxes/{id}/processes/{pid}/signal.
func (h *Handlers) SignalProcess(w http.ResponseWriter, r *http.Request) {
	var req api.SignalRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	if err := h.E.SignalProcess(r.Context(), r.PathValue("id"), r.PathValue("pid"), req.Signal, false, rest.Actor(r)); err != nil {
		rest.Error(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// KillProcess sends SIGKILL and ends a supervised process's restarts.
func (h *Handlers) KillProcess(w http.ResponseWriter, r *http.Request) {
	if err := h.E.SignalProcess(r.Context(), r.PathValue("id"), r.PathValue("pid"), "SIGKILL", true, rest.Actor(r)); err != nil {
		rest.Error(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// WaitProcess answers the process's exit once it has ended for good.
func (h *Handlers) WaitProcess(w http.ResponseWriter, r *http.Request) {
	ex, err := h.E.WaitProcess(r.Context(), r.PathValue("id"), r.PathValue("pid"), rest.Actor(r))
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, convert.ExitToAPI(ex))
}

// ProcessWS attaches to a process over a WebSocket, for PTY processes:
// the kept output then live output as WSStdout/WSStderr frames; the client
// sends WSStdin, WSStdinEOF and WSResize; WSExit ends it when the process
// ends. Leaving does not end the process.
func (h *Handlers) ProcessWS(w http.ResponseWriter, r *http.Request) {
	id, pid := r.PathValue("id"), r.PathValue("pid")
	// A missing sandbox or process is the upgrade's answer (404), not an
	// error frame after it; one that ends meanwhile is still the frame's.
	if _, err := h.findProcess(r.Context(), id, pid); err != nil {
		rest.Error(w, err)
		return
	}
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{rest.WSProtocol}})
	if err != nil {
		return
	}
	defer conn.CloseNow()
	conn.SetReadLimit(1 << 20)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ws := &wsStream{conn: conn, ctx: ctx}
	send := ws.send
	in := ws.readInput(cancel, false)
	defer in.CloseRead() // a write waiting for a reader that never came ends
	ex, err := h.E.AttachProcess(ctx, id, pid, true, procs.AttachIO{
		Stdin: in, KeepStdin: true, // resizes in order with the bytes
		Stdout: kindWriter{api.WSStdout, send}, Stderr: kindWriter{api.WSStderr, send},
	}, rest.Actor(r))
	if err != nil {
		if !errors.Is(err, context.Canceled) && ctx.Err() == nil {
			b, _ := json.Marshal(rest.StreamError(w, err))
			_ = send(api.WSError, b)
			conn.Close(websocket.StatusNormalClosure, "")
		}
		return
	}
	if ex != nil {
		b, _ := json.Marshal(convert.ExitToAPI(*ex))
		_ = send(api.WSExit, b)
	}
	conn.Close(websocket.StatusNormalClosure, "")
}
