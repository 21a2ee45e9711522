package engine

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/agent"
)

// The conversions lose nothing (the server's tests check that the API's
// types, converted from these, encode as the wire's did).
func TestWireConversions(t *testing.T) {
	same := func(name string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: converted to %+v, want %+v", name, got, want)
		}
	}
	ex := agent.Exit{Code: 137, Signal: "SIGKILL", TimedOut: true, OOMKilled: true, DurationMS: 1.5}
	same("exit", exitOf(ex), Exit{Code: 137, Signal: "SIGKILL", TimedOut: true, OOMKilled: true, Duration: 1500 * time.Microsecond})
	for _, ms := range []float64{0, 0.001, 1.5, 12.345, 98765.432, 3.6e6} {
		if got := float64(msDuration(ms).Microseconds()) / 1000; got != ms {
			t.Errorf("%v ms came back as %v", ms, got)
		}
	}
	fi := agent.FileInfo{Name: "b", Path: "/a/b", Size: 3, Mode: 0o644, ModTime: time.Unix(1, 2).UTC(), IsDir: true, Link: "x"}
	want := FileInfo{Name: "b", Path: "/a/b", Size: 3, Mode: 0o644, ModTime: time.Unix(1, 2).UTC(), IsDir: true, Link: "x"}
	same("file info", fileInfoOf(fi), want)
	same("file infos", fileInfosOf([]agent.FileInfo{fi, {}}), []FileInfo{want, {}})
	if fileInfosOf(nil) != nil {
		t.Error("nil list converted to non-nil")
	}
}

func TestAgentResizes(t *testing.T) {
	if agentResizes(context.Background(), nil) != nil {
		t.Fatal("nil resize channel became non-nil")
	}
	in := make(chan Resize)
	out := agentResizes(context.Background(), in)
	in <- Resize{Rows: 50, Cols: 120}
	if rs := <-out; rs != (agent.Resize{Rows: 50, Cols: 120}) {
		t.Errorf("forwarded %+v", rs)
	}
	close(in)
	if _, ok := <-out; ok {
		t.Error("out not closed after in")
	}
	// The exec ending stops the forwarder with the API's channel open.
	ctx, cancel := context.WithCancel(context.Background())
	out = agentResizes(ctx, make(chan Resize))
	cancel()
	if _, ok := <-out; ok {
		t.Error("out not closed after the exec ended")
	}
}
