package exec

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/server/convert"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
)

// ExecWS serves an interactive exec over a WebSocket: the first message is
// the JSON ExecRequest, then binary frames tagged by their first byte (see
// api.WSStdin and friends).
func (h *Handlers) ExecWS(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	// Fail fast with a plain HTTP error for an unknown sandbox.
	if _, err := h.E.Get(r.Context(), id); err != nil {
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
	sendErr := func(err error) {
		b, _ := json.Marshal(rest.StreamError(w, err))
		_ = send(api.WSError, b)
		conn.Close(websocket.StatusNormalClosure, "")
	}

	typ, first, err := conn.Read(ctx)
	if err != nil {
		return
	}
	var req api.ExecRequest
	if typ != websocket.MessageText {
		sendErr(errdefs.Invalid("the first message must be the JSON exec request"))
		return
	}
	if err := input.DecodeBytes(first, &req); err != nil { // the gate validates it (access.Check)
		sendErr(err)
		return
	}
	in := ws.readInput(cancel, true)
	defer in.CloseRead() // a write waiting for a reader that never came ends
	exit, err := h.E.Exec(ctx, id, convert.ExecRequest(&req), engine.ExecIO{
		Stdin:  in, // its resizes in order with its bytes
		Stdout: kindWriter{api.WSStdout, send},
		Stderr: kindWriter{api.WSStderr, send},
	}, rest.Actor(r))
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			sendErr(err)
		}
		return
	}
	b, _ := json.Marshal(convert.ExitToAPI(exit))
	_ = send(api.WSExit, b)
	conn.Close(websocket.StatusNormalClosure, "")
}

// wsStream is the framing the WebSocket routes (exec, process attach)
// share: binary messages tagged by their first byte (api.WSStdin and
// friends), writes serialised and each bounded by its own deadline.
type wsStream struct {
	conn *websocket.Conn
	ctx  context.Context
	mu   sync.Mutex
}

// send writes one message of kind.
func (ws *wsStream) send(kind byte, p []byte) error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	wctx, c := context.WithTimeout(ws.ctx, 30*time.Second)
	defer c()
	return ws.conn.Write(wctx, websocket.MessageBinary, append([]byte{kind}, p...))
}

// readInput forwards the client's WSStdin, WSStdinEOF and WSResize
// messages, in their order, into the returned terminal input until the
// connection ends, and then calls cancel. failStdin: the input's reader
// gets the connection's error rather than EOF.
func (ws *wsStream) readInput(cancel func(), failStdin bool) engine.TermInput {
	in := engine.NewTermInput()
	go func() {
		defer in.Close()
		for {
			typ, msg, err := ws.conn.Read(ws.ctx)
			if err != nil {
				if failStdin {
					in.CloseWithError(err)
				}
				cancel()
				return
			}
			if typ != websocket.MessageBinary || len(msg) == 0 {
				continue
			}
			switch msg[0] {
			case api.WSStdin:
				in.Write(msg[1:]) // fails once the input's reader is gone; the connection is still read to see it end
			case api.WSStdinEOF:
				in.Close()
			case api.WSResize:
				var rs api.Resize
				if json.Unmarshal(msg[1:], &rs) == nil {
					in.Resize(convert.Resize(rs))
				}
			}
		}
	}()
	return in
}

type kindWriter struct {
	kind byte
	send func(byte, []byte) error
}

func (k kindWriter) Write(p []byte) (int, error) {
	if err := k.send(k.kind, p); err != nil {
		return 0, err
	}
	return len(p), nil
}
