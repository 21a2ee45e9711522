package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/api"
)

// Background processes: /v1/sandboxes/{id}/processes. pid is a process id
// as listed, or a tag.

func processPath(id, pid string, rest ...string) string {
	p := sandboxPath(id, "processes", pathEscape(pid))
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// StartProcess starts a background process; it outlives this client.
func (c *Client) StartProcess(ctx context.Context, id string, req api.StartProcessRequest) (api.Process, error) {
	var p api.Process
	err := c.do(ctx, http.MethodPost, sandboxPath(id, "processes"), nil, req, &p)
	return p, err
}

// Processes lists a sandbox's background processes, running and ended.
func (c *Client) Processes(ctx context.Context, id string) ([]api.Process, error) {
	var l api.ProcessList
	err := c.do(ctx, http.MethodGet, sandboxPath(id, "processes"), nil, nil, &l)
	return l.Processes, err
}

// Process describes one background process.
func (c *Client) Process(ctx context.Context, id, pid string) (api.Process, error) {
	var p api.Process
	err := c.do(ctx, http.MethodGet, processPath(id, pid), nil, nil, &p)
	return p, err
}

// ProcessLogs writes a process's kept output and, with follow, its live
// output until it ends. It returns the exit if the process has ended (nil
// for a running one without follow). gap, if set, is told of output
// dropped before it was read.
func (c *Client) ProcessLogs(ctx context.Context, id, pid string, follow bool, stdout, stderr io.Writer, gap func(int64)) (*api.ExecExit, error) {
	q := url.Values{}
	if follow {
		q.Set("follow", "true")
	}
	hreq, err := c.newRequest(ctx, http.MethodGet, processPath(id, pid, "logs"), q, nil)
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(hreq)
	if err != nil {
		return nil, err
	}
	defer closeBody(resp.Body)
	dec := json.NewDecoder(resp.Body)
	for {
		var ev api.ProcessEvent
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, nil
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("read log stream: %w", err)
		}
		switch {
		case ev.Error != nil:
			return nil, apiError(ev.Error)
		case ev.Exit != nil:
			return ev.Exit, nil
		case ev.Gap > 0:
			if gap != nil {
				gap(ev.Gap)
			}
		case len(ev.Data) > 0:
			w := stdout
			if ev.Stream == "stderr" {
				w = stderr
			}
			if w == nil {
				continue
			}
			if _, err := w.Write(ev.Data); err != nil {
				return nil, fmt.Errorf("write %s: %w", ev.Stream, err)
			}
		}
	}
}

// ProcessStdin writes r to a process's stdin, closing it after if close.
func (c *Client) ProcessStdin(ctx context.Context, id, pid string, r io.Reader, close bool) error {
	q := url.Values{}
	if close {
		q.Set("close", "true")
	}
	if r == nil {
		r = http.NoBody
	}
	return c.do(ctx, http.MethodPost, processPath(id, pid, "stdin"), q, r, nil)
}

// SignalProcess sends signal ("TERM", "SIGINT"; "" is SIGTERM) to a
// process's group.
func (c *Client) SignalProcess(ctx context.Context, id, pid, signal string) error {
	return c.do(ctx, http.MethodPost, processPath(id, pid, "signal"), nil, api.SignalRequest{Signal: signal}, nil)
}

// KillProcess kills a process with SIGKILL; a supervised one is not
// restarted.
func (c *Client) KillProcess(ctx context.Context, id, pid string) error {
	return c.do(ctx, http.MethodPost, processPath(id, pid, "kill"), nil, nil, nil)
}

// WaitProcess waits until a process has ended for good and returns its
// exit.
func (c *Client) WaitProcess(ctx context.Context, id, pid string) (api.ExecExit, error) {
	var ex api.ExecExit
	err := c.do(ctx, http.MethodPost, processPath(id, pid, "wait"), nil, nil, &ex)
	return ex, err
}

// AttachProcess attaches to a process over a WebSocket (for PTY ones):
// its kept output, then live output, until it ends (the exit) or ctx is
// cancelled. stdin goes to the process and is never closed by EOF;
// resize resizes its terminal. Leaving does not end the process.
func (c *Client) AttachProcess(ctx context.Context, id, pid string, stdin io.Reader, stdout, stderr io.Writer, resize <-chan api.Resize) (api.ExecExit, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := http.Header{}
	c.setHeaders(h)
	conn, resp, err := websocket.Dial(ctx, c.url(processPath(id, pid, "ws"), nil), &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return api.ExecExit{}, decodeError(resp)
		}
		return api.ExecExit{}, c.transportError(ctx, err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(wsReadLimit)
	if stdin != nil {
		go func() {
			buf := make([]byte, stdinChunk+1)
			for {
				n, err := stdin.Read(buf[1:])
				if ctx.Err() != nil {
					return
				}
				if n > 0 {
					buf[0] = api.WSStdin
					if conn.Write(ctx, websocket.MessageBinary, buf[:n+1]) != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
	if resize != nil {
		go pumpResize(ctx, conn, resize)
	}
	return readWSOutput(ctx, conn, stdout, stderr)
}
