package server

import (
	"encoding/json"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/node/memnode"
)

// GET /v1/version lists every runtime class, the default first, with
// what it can do as the backend says it: a client learns what a class
// refuses before it asks.
func TestVersionListsClassCaps(t *testing.T) {
	e := newTenv(t)
	code, body := e.do("local", "GET", "/v1/version", "")
	if code != 200 {
		t.Fatalf("GET /v1/version: %d %s", code, body)
	}
	var v api.Version
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	want := []api.RuntimeClass{
		{Name: memnode.FakeRunc.Name, Capabilities: api.RuntimeCaps{Freeze: true, Capture: true, RootLayer: true, Egress: true, Pool: true, Rename: true, Sudo: true}},
		{Name: memnode.FakeRunsc.Name, Capabilities: api.RuntimeCaps{Freeze: true, Checkpoint: true, Capture: true, RootLayer: true, Sudo: true}},
	}
	if len(v.Classes) != len(want) {
		t.Fatalf("classes %+v, want %+v", v.Classes, want)
	}
	for i := range want {
		if v.Classes[i] != want[i] {
			t.Errorf("class %d = %+v, want %+v", i, v.Classes[i], want[i])
		}
	}
}
