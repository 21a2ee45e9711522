package engine

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/agent"
)

// The conversions lose nothing: today the API's types carry the same
// fields under the same names as the wire's, so a value and its
// conversion encode alike.
func TestWireConversions(t *testing.T) {
	same := func(name string, a, b any) {
		t.Helper()
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if string(ja) != string(jb) {
			t.Errorf("%s: %s converted to %s", name, ja, jb)
		}
	}
	ex := agent.Exit{Code: 137, Signal: "SIGKILL", TimedOut: true, OOMKilled: true, DurationMS: 1.5}
	same("exit", ex, apiExit(ex))
	fi := agent.FileInfo{Name: "b", Path: "/a/b", Size: 3, Mode: 0o644, ModTime: time.Unix(1, 2).UTC(), IsDir: true, Link: "x"}
	same("file info", fi, apiFileInfo(fi))
	same("file infos", []agent.FileInfo{fi, {}}, apiFileInfos([]agent.FileInfo{fi, {}}))
	if apiFileInfos(nil) != nil {
		t.Error("nil list converted to non-nil")
	}
}

func TestAgentResizes(t *testing.T) {
	if agentResizes(context.Background(), nil) != nil {
		t.Fatal("nil resize channel became non-nil")
	}
	in := make(chan api.Resize)
	out := agentResizes(context.Background(), in)
	in <- api.Resize{Rows: 50, Cols: 120}
	if rs := <-out; rs != (agent.Resize{Rows: 50, Cols: 120}) {
		t.Errorf("forwarded %+v", rs)
	}
	close(in)
	if _, ok := <-out; ok {
		t.Error("out not closed after in")
	}
	// The exec ending stops the forwarder with the API's channel open.
	ctx, cancel := context.WithCancel(context.Background())
	out = agentResizes(ctx, make(chan api.Resize))
	cancel()
	if _, ok := <-out; ok {
		t.Error("out not closed after the exec ended")
	}
}
