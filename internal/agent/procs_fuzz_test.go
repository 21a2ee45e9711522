package agent

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/agent/wire"
)

// FuzzProcClient feeds the background-process calls bytes as a malicious
// agent's answer: none may hang, panic, or return a process over its caps.
func FuzzProcClient(f *testing.F) {
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	f.Add(frame(wire.FrameResult, []byte(`{"id":"1","argv":["sleep","9"],"started":"2024-01-01T00:00:00Z","state":"running","pid":7}`)))
	f.Add(join(frame(wire.FrameResult, []byte(`{"boot":"ab","count":1}`)),
		frame(wire.FrameResult, []byte(`{"id":"1","tag":"web","argv":["x"],"state":"exited","exit":{"code":3}}`)), frame(wire.FrameEnd, nil)))
	f.Add(join(frame(wire.FrameResult, []byte(`{"boot":"ab","count":100000}`))))
	f.Add(join(frame(wire.FrameStdout, []byte("out")), frame(wire.FrameGap, []byte(`{"skipped":12}`)), frame(wire.FrameStderr, []byte("e")), frame(wire.FrameExit, []byte(`{"code":0}`))))
	f.Add(join(frame(wire.FrameGap, []byte(`{"skipped":-1}`))))
	f.Add(join(frame(wire.FrameResult, []byte(`{"id":"1","argv":[],"state":"weird"}`))))
	f.Add(join(frame(wire.FrameEnd, nil)))
	f.Add(join(frame(wire.FrameExit, []byte(`{"code":137,"signal":"SIGKILLSIGKILLSIGKILLSIGKILLSIGKILLSIGKILL"}`))))
	f.Fuzz(func(t *testing.T, data []byte) {
		for op := range 6 {
			procClientAgainst(t, op, data)
		}
	})
}

func procClientAgainst(t *testing.T, op int, data []byte) {
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
	check := func(in ProcInfo) {
		if len(in.Argv) > wire.ProcInfoArgs || len(in.Tag) > wire.MaxTagBytes || (in.Exit != nil && len(in.Exit.Signal) > 32) {
			t.Fatalf("op %d: process over its caps: %+v", op, in)
		}
	}
	switch op {
	case 0:
		var in ProcInfo
		in, err = c.StartProc(ctx, ExecRequest{Argv: []string{"x"}}, ProcRequest{Tag: "t"})
		if err == nil {
			check(in)
		}
	case 1:
		var ps []ProcInfo
		_, ps, err = c.ListProcs(ctx)
		if len(ps) > wire.MaxProcs+wire.MaxProcExits {
			t.Fatalf("list of %d", len(ps))
		}
		for _, in := range ps {
			check(in)
		}
	case 2:
		var ex *Exit
		ex, err = c.AttachProc(ctx, "1", true, AttachIO{Stdin: strings.NewReader("in"), Gap: func(n int64) {
			if n < 0 {
				t.Fatalf("negative gap")
			}
		}})
		if ex != nil && len(ex.Signal) > 32 {
			t.Fatalf("signal %q", ex.Signal)
		}
	case 3:
		err = c.ProcStdin(ctx, "1", strings.NewReader("abc"), true)
	case 4:
		err = c.SignalProc(ctx, "1", "TERM", true)
	case 5:
		_, err = c.WaitProc(ctx, "1")
	}
	if ctx.Err() != nil {
		t.Fatalf("op %d hung against a fake agent: %v", op, err)
	}
	cli.Close()
}
