package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/api"
)

// A terminal's resize reaches the shell before the line typed after it,
// over the exec WebSocket and over a process attach: each round sends a
// resize and the next line back to back, with no wait between, and the
// shell must report the new size. The resize used to travel beside the
// input (its own channel and goroutines through the daemon to the
// agent) and the line could overtake it.
func TestTerminalResizeOrderedWithInput(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.socket)
	}}}
	dial := func(path string) *websocket.Conn {
		t.Helper()
		wc, _, err := websocket.Dial(ctx, "ws://berth"+path, &websocket.DialOptions{HTTPClient: hc, Subprotocols: []string{"berth"}})
		if err != nil {
			t.Fatalf("dial %s: %v", path, err)
		}
		wc.SetReadLimit(1 << 20)
		return wc
	}
	send := func(wc *websocket.Conn, kind byte, p []byte) {
		t.Helper()
		if err := wc.Write(ctx, websocket.MessageBinary, append([]byte{kind}, p...)); err != nil {
			t.Fatal(err)
		}
	}
	// readUntil reads output until it holds mark, and returns it.
	readUntil := func(wc *websocket.Conn, mark string) string {
		t.Helper()
		var out bytes.Buffer
		for !strings.Contains(out.String(), mark) {
			typ, msg, err := wc.Read(ctx)
			if err != nil {
				t.Fatalf("waiting for %q: %v (so far %q)", mark, err, out.String())
			}
			if typ == websocket.MessageBinary && len(msg) > 0 && (msg[0] == api.WSStdout || msg[0] == api.WSStderr) {
				out.Write(msg[1:])
			}
		}
		return out.String()
	}
	rounds := func(t *testing.T, wc *websocket.Conn) {
		for i := range 25 {
			rows, cols := 30+i, 100+i
			rs, _ := json.Marshal(api.Resize{Rows: uint16(rows), Cols: uint16(cols)})
			send(wc, api.WSResize, rs)
			// The output "m-<n>" (computed by the shell), not the echo
			// of the line typed.
			n := 1000 + i
			send(wc, api.WSStdin, fmt.Appendf(nil, "stty size; echo m-$((%d+1))\n", n-1))
			out := readUntil(wc, fmt.Sprintf("m-%d\r\n", n))
			if want := fmt.Sprintf("%d %d", rows, cols); !strings.Contains(out, want) {
				t.Fatalf("round %d: the shell saw %q, want the size %q sent before the line", i, out, want)
			}
		}
	}

	t.Run("exec", func(t *testing.T) {
		wc := dial("/v1/sandboxes/" + sb.ID + "/exec/ws")
		defer wc.CloseNow()
		req, _ := json.Marshal(api.ExecRequest{Cmd: []string{"sh"}, TTY: true, Rows: 24, Cols: 80})
		if err := wc.Write(ctx, websocket.MessageText, req); err != nil {
			t.Fatal(err)
		}
		rounds(t, wc)
		send(wc, api.WSStdin, []byte("exit 7\n"))
		for {
			typ, msg, err := wc.Read(ctx)
			if err != nil {
				t.Fatalf("waiting for the exit: %v", err)
			}
			if typ == websocket.MessageBinary && len(msg) > 0 && msg[0] == api.WSExit {
				var ex api.ExecExit
				if err := json.Unmarshal(msg[1:], &ex); err != nil || ex.Code != 7 {
					t.Fatalf("exit %s: %v", msg[1:], err)
				}
				return
			}
		}
	})
	t.Run("process attach", func(t *testing.T) {
		p, err := d.c.StartProcess(ctx, sb.ID, api.StartProcessRequest{ExecRequest: api.ExecRequest{Cmd: []string{"sh"}, TTY: true, Rows: 24, Cols: 80}})
		if err != nil {
			t.Fatal(err)
		}
		wc := dial("/v1/sandboxes/" + sb.ID + "/processes/" + p.ID + "/ws")
		defer wc.CloseNow()
		rounds(t, wc)
		send(wc, api.WSStdin, []byte("exit 0\n"))
	})
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
}
