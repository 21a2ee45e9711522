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

	f.Fuzz(func(t *testing.T, data []byte) {
		for op := range 7 {
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
	}
	if ctx.Err() != nil {
		t.Fatalf("op %d hung against a fake agent: %v", op, err)
	}
	cli.Close()
}
