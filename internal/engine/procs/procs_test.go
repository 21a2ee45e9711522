package procs

import (
	"errors"
	"fmt"
	"testing"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

// TestForgotten: a kill by process number ends the record of that run in
// the current boot only; a kill by tag ends the records with that tag,
// whichever boot their run was of.
func TestForgotten(t *testing.T) {
	sps := []*store.SupervisedProcess{
		{Key: "a", Boot: "b1", AgentID: "1", Spec: store.ProcessSpec{Tag: "web"}},
		{Key: "b", Boot: "b1", AgentID: "2"},
		{Key: "c", Boot: "b0", AgentID: "3"}, // not started again in b1
		{Key: "d", Boot: "b0", AgentID: "4", Spec: store.ProcessSpec{Tag: "db"}},
	}
	keys := func(in []*store.SupervisedProcess) (out []string) {
		for _, sp := range in {
			out = append(out, sp.Key)
		}
		return out
	}
	for _, tc := range []struct {
		ref  string
		want []string
	}{
		{"1", []string{"a"}},
		{"2", []string{"b"}},
		{"3", nil}, // process 3 of boot b1 is another process
		{"web", []string{"a"}},
		{"db", []string{"d"}},
		{"none", nil},
	} {
		if got := keys(forgotten(sps, "b1", tc.ref)); len(got) != len(tc.want) || len(got) > 0 && got[0] != tc.want[0] {
			t.Errorf("forgotten(%q) = %v, want %v", tc.ref, got, tc.want)
		}
	}
}

// TestValidateStartReadyPort: a ready port is a TCP port or none.
func TestValidateStartReadyPort(t *testing.T) {
	for port, ok := range map[int]bool{0: true, 1: true, 8000: true, 65535: true, -1: false, 65536: false} {
		req := &StartRequest{ExecRequest: engine.ExecRequest{Cmd: []string{"true"}}, Restart: "always", ReadyPort: port}
		err := req.Validate()
		if ok && err != nil || !ok && !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("ready port %d: %v", port, err)
		}
	}
}

// TestSpecOf: what is recorded is the request as given, not shared with
// it.
func TestSpecOf(t *testing.T) {
	req := &StartRequest{ExecRequest: engine.ExecRequest{Cmd: []string{"srv", "-p"}, Env: map[string]string{"K": "v"},
		Workdir: "/w", User: "1000"}, Tag: "web", Restart: "on-failure", MaxRestarts: 3, ReadyPort: 80}
	sp := specOf(req)
	req.Cmd[0], req.Env["K"] = "changed", "changed"
	if sp.Cmd[0] != "srv" || sp.Env["K"] != "v" || sp.Workdir != "/w" || sp.User != "1000" || sp.Tag != "web" ||
		sp.Restart != "on-failure" || sp.MaxRestarts != 3 || sp.ReadyPort != 80 {
		t.Errorf("specOf = %+v", sp)
	}
	if supervised("") || supervised("never") || !supervised("always") || !supervised("on-failure") {
		t.Error("supervised: only always and on-failure are")
	}
}

// TestTailWriter: the last max bytes are kept, and what went before is
// counted.
func TestTailWriter(t *testing.T) {
	w := &tailWriter{max: 8}
	for _, s := range []string{"abc", "defgh", "ij", "0123456789abcdef", "XY"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if string(w.buf) != "89abcdefXY"[2:] || w.cut != int64(3+5+2+16+2-8) {
		t.Fatalf("tail %q cut %d", w.buf, w.cut)
	}
}

// TestStoppedKeepsNewestTails: a sandbox keeps at most tailTotal bytes
// of tails, the newest processes' first; a new boot keeps the earlier
// one's tails with its processes.
func TestStoppedKeepsNewestTails(t *testing.T) {
	r := &record{}
	big := func() *tail { return &tail{stdout: make([]byte, tailBytes), stderr: make([]byte, tailBytes)} }
	var ps []Process
	n := tailTotal/(2*tailBytes) + 2
	for i := range n {
		ps = append(ps, Process{ID: fmt.Sprintf("aaaaaa-%d", i), State: "running", tail: big()})
	}
	r.stopped("aaaaaaaa", ps)
	if _, ok := r.kept("aaaaaa-0"); ok {
		t.Error("the oldest tail was kept past the bound")
	}
	if p, ok := r.kept(fmt.Sprintf("aaaaaa-%d", n-1)); !ok || p.tail.size() != 2*tailBytes {
		t.Error("the newest tail was not kept")
	}
	r.sync("bbbbbbbb", nil)
	if _, ok := r.kept(fmt.Sprintf("aaaaaa-%d", n-1)); !ok {
		t.Error("a new boot lost the earlier boot's tails")
	}
	total := 0
	for _, p := range r.snapshot("", "") {
		total += p.tail.size()
	}
	if total > tailTotal {
		t.Errorf("%d bytes of tails kept, bound %d", total, tailTotal)
	}
}

// TestSucceeded: only an on-failure run of the current boot that exited
// 0 by itself is done.
func TestSucceeded(t *testing.T) {
	sps := []*store.SupervisedProcess{
		{Key: "ok", Boot: "b1", AgentID: "1", Spec: store.ProcessSpec{Restart: "on-failure"}},
		{Key: "failed", Boot: "b1", AgentID: "2", Spec: store.ProcessSpec{Restart: "on-failure"}},
		{Key: "always", Boot: "b1", AgentID: "3", Spec: store.ProcessSpec{Restart: "always"}},
		{Key: "running", Boot: "b1", AgentID: "4", Spec: store.ProcessSpec{Restart: "on-failure"}},
		{Key: "old", Boot: "b0", AgentID: "5", Spec: store.ProcessSpec{Restart: "on-failure"}},
	}
	ins := []agent.ProcInfo{
		{ID: "1", State: "exited", Exit: &agent.Exit{Code: 0}},
		{ID: "2", State: "exited", Exit: &agent.Exit{Code: 1}},
		{ID: "3", State: "exited", Exit: &agent.Exit{Code: 0}},
		{ID: "4", State: "running"},
		{ID: "5", State: "exited", Exit: &agent.Exit{Code: 0}},
	}
	if got := succeeded(sps, "b1", ins); len(got) != 1 || got[0].Key != "ok" {
		t.Fatalf("succeeded = %+v, want ok", got)
	}
}
