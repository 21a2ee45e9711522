package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/berth-sh/berth/internal/agent/wire"
)

// frame builds one frame.
func frame(t wire.FrameType, p []byte) []byte {
	b := make([]byte, 5, 5+len(p))
	b[0] = byte(t)
	binary.BigEndian.PutUint32(b[1:], uint32(len(p)))
	return append(b, p...)
}

// FuzzClient feeds the client bytes as a malicious agent's answer (the
// seeds are FuzzHeader's in agentd): no call may hang or panic.
func FuzzClient(f *testing.F) {
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	f.Add([]byte(`{"v":1,"op":"ping"}` + "\n"))
	f.Add([]byte(`{"v":1,"op":"stat","path":"/"}` + "\n"))
	f.Add([]byte(`{"v":1,"op":"list","path":"/link"}` + "\n"))
	f.Add(join([]byte(`{"v":1,"op":"write_file","path":"/f"}`+"\n"), frame(wire.FrameData, []byte("hello")), frame(wire.FrameEnd, nil)))
	f.Add(join([]byte(`{"v":1,"op":"write_tar","path":"/"}`+"\n"), frame(wire.FrameData, []byte("garbage")), frame(wire.FrameEnd, nil)))
	f.Add(join([]byte(`{"v":2,"op":"ping"}`+"\n"), frame(wire.FrameStdin, []byte("x"))))
	f.Add(join(frame(wire.FrameResult, []byte(`{"version":"x","pid":1}`))))
	f.Add(join(frame(wire.FrameError, []byte(`{"code":"not_found","message":"nope"}`))))
	f.Add(join(frame(wire.FrameResult, []byte(`{"name":"f","size":3}`)), frame(wire.FrameData, []byte("abc")), frame(wire.FrameEnd, nil)))
	f.Add(join(frame(wire.FrameStdout, []byte("out")), frame(wire.FrameStderr, []byte("err")), frame(wire.FrameExit, []byte(`{"code":3}`))))
	f.Add([]byte{byte(wire.FrameData), 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{byte(wire.FrameData), 0, 0, 0, 10, 'a'})
	f.Add(frame(wire.FrameResult, []byte(`{"remaining":-7}`)))
	f.Add(frame(wire.FrameError, []byte(`{"code":"internal","message":"\u001b[2J\u001b]0;owned\u0007\u009b31m\ufffe"}`)))
	f.Add(join(frame(wire.FrameEnd, nil)))

	f.Fuzz(func(t *testing.T, data []byte) {
		for op := range 9 {
			clientAgainst(t, op, data)
		}
	})
}

// clientAgainst runs one client call against a fake agent that answers
// with data whatever is asked.
func clientAgainst(t *testing.T, op int, data []byte) {
	cli, srv := net.Pipe()
	go func() {
		go io.Copy(io.Discard, srv)
		srv.Write(data)
		srv.Close()
	}()
	c := &Client{dial: func(context.Context) (net.Conn, error) { return cli, nil }}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	switch op {
	case 0:
		_, err = c.Ping(ctx)
	case 1:
		_, err = c.Stat(ctx, "/x")
	case 2:
		_, err = c.List(ctx, "/x")
	case 3:
		_, err = c.ReadFile(ctx, "/x", io.Discard)
	case 4:
		_, err = c.Exec(ctx, ExecRequest{Argv: []string{"x"}}, ExecIO{Stdin: strings.NewReader("in")})
	case 5:
		_, err = c.WriteFile(ctx, "/x", 0, strings.NewReader("data"))
	case 6:
		err = c.ReadTar(ctx, "/x", io.Discard)
	case 7:
		err = c.SecretFiles(ctx, "", []wire.SecretFile{{Path: "/run/secrets/a", Data: []byte("v")}})
	case 8:
		var left int
		left, err = c.Shutdown(ctx, "SIGTERM", time.Second)
		if left < 0 {
			t.Fatalf("shutdown: %d processes left", left)
		}
	}
	if err != nil && !safeText(err.Error()) {
		t.Fatalf("op %d: an error with control bytes from the agent: %q", op, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("op %d hung against a fake agent: %v", op, err)
	}
	cli.Close()
}

// safeText reports whether s is valid UTF-8 without control characters
// (what wire.SafeMessage guarantees of the agent's part of an error).
func safeText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}
