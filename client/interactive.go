package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/api"
)

// wsReadLimit bounds one WebSocket message from the daemon; output frames
// are far smaller, this only stops a broken peer from exhausting memory.
const wsReadLimit = 4 << 20

// stdinChunk is the largest stdin payload per frame. With its kind byte a
// frame stays under the 32 KiB a WebSocket peer accepts by default
// (coder/websocket's read limit), so the daemon needs no tuning for it.
const stdinChunk = 16 << 10

// ExecInteractive runs a command in a sandbox over the WebSocket route,
// streaming stdin to it while it runs. With req.TTY the command gets a
// terminal of req.Rows x req.Cols (its output then arrives on stdout only)
// and each value received on resize changes its size.
//
// stdin is read until EOF, which is passed on to the command; a nil stdin is
// an empty one. Reads from stdin cannot be interrupted, so when the command
// exits first a read in progress is left to finish in the background (for
// os.Stdin that is the next line or keystroke); nothing more is sent.
func (c *Client) ExecInteractive(ctx context.Context, id string, req api.ExecRequest, stdin io.Reader, stdout, stderr io.Writer, resize <-chan api.Resize) (api.ExecExit, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	h := http.Header{}
	c.setHeaders(h)
	conn, resp, err := websocket.Dial(ctx, c.url(sandboxPath(id, "exec", "ws"), nil), &websocket.DialOptions{
		HTTPClient: c.hc,
		HTTPHeader: h,
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return api.ExecExit{}, decodeError(resp)
		}
		return api.ExecExit{}, c.transportError(ctx, err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(wsReadLimit)

	first, err := json.Marshal(req)
	if err != nil {
		return api.ExecExit{}, fmt.Errorf("encode request: %w", err)
	}
	if err := conn.Write(ctx, websocket.MessageText, first); err != nil {
		return api.ExecExit{}, fmt.Errorf("send exec request: %w", err)
	}

	// Writers: stdin and resize pumps. Conn.Write is safe for concurrent
	// use; each pump stops when ctx is cancelled (on return).
	go pumpStdin(ctx, conn, stdin)
	if resize != nil {
		go pumpResize(ctx, conn, resize)
	}

	return readWSOutput(ctx, conn, stdout, stderr)
}

// readWSOutput reads the server's messages of an exec or process attach
// WebSocket: output to stdout/stderr (either may be nil), until the exit
// (returned) or an error frame (returned as the API's error).
func readWSOutput(ctx context.Context, conn *websocket.Conn, stdout, stderr io.Writer) (api.ExecExit, error) {
	for {
		typ, msg, err := conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return api.ExecExit{}, ctx.Err()
			}
			return api.ExecExit{}, wsReadError(err)
		}
		if typ != websocket.MessageBinary || len(msg) == 0 {
			continue
		}
		kind, payload := msg[0], msg[1:]
		switch kind {
		case api.WSStdout, api.WSStderr:
			w := stdout
			if kind == api.WSStderr {
				w = stderr
			}
			if w != nil {
				if _, err := w.Write(payload); err != nil {
					return api.ExecExit{}, fmt.Errorf("write output: %w", err)
				}
			}
		case api.WSExit:
			var exit api.ExecExit
			if err := json.Unmarshal(payload, &exit); err != nil {
				return api.ExecExit{}, fmt.Errorf("decode exit frame: %w", err)
			}
			finish(ctx, conn)
			return exit, nil
		case api.WSError:
			var e api.Error
			if err := json.Unmarshal(payload, &e); err != nil {
				return api.ExecExit{}, fmt.Errorf("decode error frame: %w", err)
			}
			finish(ctx, conn)
			return api.ExecExit{}, apiError(&e)
		}
	}
}

// finish waits briefly for the close frame the daemon sends after the last
// frame, so both sides see a clean close; the deferred CloseNow cuts it
// short if the daemon does not.
func finish(ctx context.Context, conn *websocket.Conn) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for {
		if _, _, err := conn.Read(ctx); err != nil {
			return
		}
	}
}

// wsReadError explains a connection that ended before the exit frame.
func wsReadError(err error) error {
	if websocket.CloseStatus(err) != -1 {
		var ce websocket.CloseError
		if errors.As(err, &ce) && ce.Reason != "" {
			return fmt.Errorf("%w: daemon closed the connection: %s", ErrNoExit, ce.Reason)
		}
		return ErrNoExit
	}
	if errors.Is(err, io.EOF) || strings.Contains(err.Error(), "EOF") {
		return ErrNoExit
	}
	return fmt.Errorf("%w: %v", ErrNoExit, err)
}

// pumpStdin sends stdin as WSStdin frames, then WSStdinEOF.
func pumpStdin(ctx context.Context, conn *websocket.Conn, stdin io.Reader) {
	if stdin != nil {
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
				// EOF or a broken stdin: either way the command sees
				// its input end.
				break
			}
		}
	}
	_ = conn.Write(ctx, websocket.MessageBinary, []byte{api.WSStdinEOF})
}

func pumpResize(ctx context.Context, conn *websocket.Conn, resize <-chan api.Resize) {
	for {
		select {
		case <-ctx.Done():
			return
		case r, ok := <-resize:
			if !ok {
				return
			}
			b, _ := json.Marshal(r)
			if conn.Write(ctx, websocket.MessageBinary, append([]byte{api.WSResize}, b...)) != nil {
				return
			}
		}
	}
}
