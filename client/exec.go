package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/berth-sh/berth/api"
)

// Exec runs a command in a sandbox and waits for it. Output is written to
// stdout and stderr (either may be nil to discard) as the daemon streams it.
// req.Stdin, if set, is the command's whole stdin. A command that runs and
// fails is not an error: its code is in the returned ExecExit.
func (c *Client) Exec(ctx context.Context, id string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExecExit, error) {
	hreq, err := c.newRequest(ctx, http.MethodPost, sandboxPath(id, "exec"), nil, req)
	if err != nil {
		return api.ExecExit{}, err
	}
	hreq.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(hreq)
	if err != nil {
		return api.ExecExit{}, err
	}
	defer closeBody(resp.Body)
	return readExecStream(ctx, resp.Body, stdout, stderr)
}

// Run is the one-shot ephemeral job of POST /v1/run: the daemon creates a
// sandbox from req.Sandbox, runs req.Exec in it, streams its output and
// destroys the sandbox when the command ends. Cancelling ctx drops the
// connection, which makes the daemon destroy the sandbox too. The sandbox id
// is returned as soon as it is known, also with an error.
func (c *Client) Run(ctx context.Context, req api.RunRequest, stdout, stderr io.Writer) (string, api.ExecExit, error) {
	hreq, err := c.newRequest(ctx, http.MethodPost, "/v1/run", nil, req)
	if err != nil {
		return "", api.ExecExit{}, err
	}
	hreq.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(hreq)
	if err != nil {
		return "", api.ExecExit{}, err
	}
	// Close without draining: after the exit event the daemon is only
	// tearing the sandbox down, which the caller need not wait for.
	defer resp.Body.Close()
	id := resp.Header.Get(SandboxIDHeader)
	exit, err := readExecStream(ctx, resp.Body, stdout, stderr)
	return id, exit, err
}

// ErrNoExit is returned when an exec stream ends before its exit event: the
// connection or the daemon went away while the command ran.
var ErrNoExit = errors.New("exec stream ended without an exit status")

// readExecStream consumes an NDJSON stream of api.ExecEvent, writing output
// as each line arrives.
func readExecStream(ctx context.Context, body io.Reader, stdout, stderr io.Writer) (api.ExecExit, error) {
	dec := json.NewDecoder(body)
	for {
		var ev api.ExecEvent
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil {
				return api.ExecExit{}, ctx.Err()
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return api.ExecExit{}, ErrNoExit
			}
			return api.ExecExit{}, fmt.Errorf("read exec stream: %w", err)
		}
		switch {
		case ev.Error != nil:
			return api.ExecExit{}, apiError(ev.Error)
		case ev.Exit != nil:
			return *ev.Exit, nil
		case len(ev.Data) > 0:
			w := stdout
			if ev.Stream == "stderr" {
				w = stderr
			}
			if w == nil {
				continue
			}
			if _, err := w.Write(ev.Data); err != nil {
				return api.ExecExit{}, fmt.Errorf("write %s: %w", ev.Stream, err)
			}
		}
	}
}
