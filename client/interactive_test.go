package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/api"
)

// fakeWSExec is a minimal server side of /exec/ws: it echoes stdin to
// stdout, reports resizes on stderr and exits with the number of stdin
// bytes when stdin ends.
func fakeWSExec(t *testing.T) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/exec/ws", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") == "missing" {
			writeJSON(w, 404, api.ErrorBody{Error: api.Error{Code: "not_found", Message: "no such sandbox"}})
			return
		}
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.CloseNow()
		ctx := r.Context()
		typ, first, err := conn.Read(ctx)
		if err != nil || typ != websocket.MessageText {
			t.Errorf("first message: %v %v", typ, err)
			return
		}
		var req api.ExecRequest
		if err := json.Unmarshal(first, &req); err != nil {
			t.Error(err)
			return
		}
		send := func(kind byte, p []byte) {
			_ = conn.Write(ctx, websocket.MessageBinary, append([]byte{kind}, p...))
		}
		if r.PathValue("id") == "broken" {
			e, _ := json.Marshal(api.Error{Code: "unavailable", Message: "agent unreachable"})
			send(api.WSError, e)
			conn.Close(websocket.StatusNormalClosure, "")
			return
		}
		send(api.WSStderr, fmt.Appendf(nil, "tty=%v %dx%d\n", req.TTY, req.Rows, req.Cols))
		total := 0
		for {
			_, msg, err := conn.Read(ctx)
			if err != nil {
				return
			}
			switch msg[0] {
			case api.WSStdin:
				total += len(msg) - 1
				send(api.WSStdout, msg[1:])
			case api.WSResize:
				var rs api.Resize
				_ = json.Unmarshal(msg[1:], &rs)
				send(api.WSStderr, fmt.Appendf(nil, "resize %dx%d\n", rs.Rows, rs.Cols))
			case api.WSStdinEOF:
				exit, _ := json.Marshal(api.ExecExit{Code: total % 256})
				send(api.WSExit, exit)
				conn.Close(websocket.StatusNormalClosure, "")
				return
			}
		}
	})
	return mux
}

// gatedReader returns its data, then blocks until release is closed, then
// reports EOF: stdin that stays open while the test does something else.
type gatedReader struct {
	data    []byte
	release chan struct{}
}

func (g *gatedReader) Read(p []byte) (int, error) {
	if len(g.data) > 0 {
		n := copy(p, g.data)
		g.data = g.data[n:]
		return n, nil
	}
	<-g.release
	return 0, io.EOF
}

func TestExecInteractive(t *testing.T) {
	c := newTestClient(t, fakeWSExec(t), "key")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// stdin bigger than one frame, then a resize while stdin is still
	// open, then EOF.
	input := strings.Repeat("abcdefgh", 10000)
	stdin := &gatedReader{data: []byte(input), release: make(chan struct{})}
	resize := make(chan api.Resize)
	var stdout, stderr bytes.Buffer
	done := make(chan struct{})
	var exit api.ExecExit
	var err error
	go func() {
		defer close(done)
		exit, err = c.ExecInteractive(ctx, "sb", api.ExecRequest{Cmd: []string{"cat"}, TTY: true, Rows: 24, Cols: 80}, stdin, &stdout, &stderr, resize)
	}()
	resize <- api.Resize{Rows: 50, Cols: 132}
	// Give the resize frame time to arrive before stdin ends; the fake
	// reports it on stderr.
	time.Sleep(50 * time.Millisecond)
	close(stdin.release)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if exit.Code != len(input)%256 {
		t.Errorf("exit code = %d, want %d", exit.Code, len(input)%256)
	}
	if stdout.String() != input {
		t.Errorf("stdout: got %d bytes, want %d", stdout.Len(), len(input))
	}
	if want := "tty=true 24x80\nresize 50x132\n"; stderr.String() != want {
		t.Errorf("stderr = %q, want %q", stderr.String(), want)
	}
}

func TestExecInteractiveErrors(t *testing.T) {
	c := newTestClient(t, fakeWSExec(t), "")
	ctx := context.Background()

	_, err := c.ExecInteractive(ctx, "missing", api.ExecRequest{Cmd: []string{"sh"}}, nil, io.Discard, io.Discard, nil)
	if !IsNotFound(err) || err.Error() != "no such sandbox" {
		t.Errorf("missing sandbox: %v", err)
	}
	_, err = c.ExecInteractive(ctx, "broken", api.ExecRequest{Cmd: []string{"sh"}}, nil, io.Discard, io.Discard, nil)
	var e *Error
	if !errors.As(err, &e) || e.Code != "unavailable" {
		t.Errorf("error frame: %v", err)
	}
	// nil stdin is an empty one: the command sees EOF and exits.
	exit, err := c.ExecInteractive(ctx, "sb", api.ExecRequest{Cmd: []string{"cat"}}, nil, io.Discard, io.Discard, nil)
	if err != nil || exit.Code != 0 {
		t.Errorf("nil stdin: %+v %v", exit, err)
	}
}
