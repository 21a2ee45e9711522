package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// lifecycleFake is a tiny state machine behind the lifecycle routes.
type lifecycleFake struct {
	mu    sync.Mutex
	state string
}

func (f *lifecycleFake) handler() http.Handler {
	allowed := map[string][]string{ // verb -> states it applies to
		"pause":      {"running"},
		"resume":     {"paused"},
		"stop":       {"running", "paused"},
		"start":      {"stopped"},
		"reset":      {"running", "stopped"},
		"quarantine": {"running", "paused", "stopped"},
		"release":    {"quarantined"},
		"touch":      {"running", "paused", "stopped"},
	}
	next := map[string]string{
		"pause": "paused", "resume": "running", "stop": "stopped", "start": "running",
		"quarantine": "quarantined", "release": "running",
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes/{id}/{verb}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		verb := r.PathValue("verb")
		states, ok := allowed[verb]
		if !ok {
			writeJSON(w, 404, api.ErrorBody{Error: api.Error{Code: "not_found", Message: "no route"}})
			return
		}
		okState := false
		for _, s := range states {
			okState = okState || s == f.state
		}
		if !okState {
			writeJSON(w, 409, api.ErrorBody{Error: api.Error{Code: "conflict", Message: "cannot " + verb + " sandbox " + r.PathValue("id") + ": it is " + f.state}})
			return
		}
		if n, ok := next[verb]; ok {
			f.state = n
		}
		now := time.Now().UTC()
		writeJSON(w, 200, api.Sandbox{ID: r.PathValue("id"), State: f.state, LastActivityAt: &now})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/diff", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") == "empty" {
			_, _ = w.Write([]byte("null"))
			return
		}
		writeJSON(w, 200, []api.DiffEntry{
			{Path: "/etc/hosts", Kind: "changed", Size: 120},
			{Path: "/workspace/out", Kind: "added", Size: 4096, Dir: true},
			{Path: "/tmp/x", Kind: "removed"},
		})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		after := r.URL.Query().Get("after")
		all := []api.Event{{ID: 1, Type: "state"}, {ID: 2, Type: "state"}, {ID: 3, Type: "exec"}}
		var out []api.Event
		for _, e := range all {
			if after == "" || e.ID > mustInt(after) {
				out = append(out, e)
			}
		}
		writeJSON(w, 200, out)
	})
	return mux
}

func mustInt(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func TestLifecycleVerbs(t *testing.T) {
	f := &lifecycleFake{state: "running"}
	c := newTestClient(t, f.handler(), "")
	ctx := context.Background()
	steps := []struct {
		name string
		fn   func(context.Context, string) (*api.Sandbox, error)
		want string // state after, "" for a conflict
	}{
		{"pause", c.Pause, "paused"},
		{"pause again", c.Pause, ""},
		{"touch", c.Touch, "paused"},
		{"resume", c.Resume, "running"},
		{"start while running", c.Start, ""},
		{"stop", c.Stop, "stopped"},
		{"reset", c.Reset, "stopped"},
		{"start", c.Start, "running"},
		{"quarantine", c.Quarantine, "quarantined"},
		{"resume quarantined", c.Resume, ""},
		{"release", c.Release, "running"},
	}
	for _, s := range steps {
		sb, err := s.fn(ctx, "sb 1")
		if s.want == "" {
			if !IsConflict(err) {
				t.Fatalf("%s: err = %v, want conflict", s.name, err)
			}
			var e *Error
			if !errors.As(err, &e) || e.Status != 409 || e.Message == "" {
				t.Fatalf("%s: err = %#v", s.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if sb.ID != "sb 1" || sb.State != s.want || sb.LastActivityAt == nil {
			t.Fatalf("%s: sandbox = %+v, want state %s", s.name, sb, s.want)
		}
	}
}

func TestDiffAndEventsAfter(t *testing.T) {
	c := newTestClient(t, (&lifecycleFake{}).handler(), "")
	ctx := context.Background()
	d, err := c.Diff(ctx, "sb1")
	if err != nil || len(d) != 3 || d[0].Kind != "changed" || d[0].Size != 120 || !d[1].Dir {
		t.Fatalf("Diff = %+v, %v", d, err)
	}
	d, err = c.Diff(ctx, "empty")
	if err != nil || d == nil || len(d) != 0 {
		t.Fatalf("Diff(null) = %#v, %v; want an empty non-nil slice", d, err)
	}
	evs, err := c.EventsAfter(ctx, "sb1", 1)
	if err != nil || len(evs) != 2 || evs[0].ID != 2 {
		t.Fatalf("EventsAfter(1) = %+v, %v", evs, err)
	}
	evs, err = c.EventsAfter(ctx, "sb1", 3)
	if err != nil || evs == nil || len(evs) != 0 {
		t.Fatalf("EventsAfter(3) = %#v, %v", evs, err)
	}
	evs, err = c.Events(ctx, "sb1")
	if err != nil || len(evs) != 3 {
		t.Fatalf("Events = %+v, %v", evs, err)
	}
}

func TestVolumes(t *testing.T) {
	var (
		mu   sync.Mutex
		vols = map[string]api.Volume{}
	)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/volumes", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		var req api.CreateVolumeRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Name == "" {
			writeJSON(w, 400, api.ErrorBody{Error: api.Error{Code: "invalid_argument", Message: "volume name is required"}})
			return
		}
		if _, ok := vols[req.Name]; ok {
			writeJSON(w, 409, api.ErrorBody{Error: api.Error{Code: "conflict", Message: "volume " + req.Name + " exists"}})
			return
		}
		v := api.Volume{ID: "vol-" + req.Name, Name: req.Name, State: "available", SizeBytes: req.SizeBytes, Inodes: req.Inodes}
		if v.Name == "busy" {
			v.State, v.AttachedTo = "attached", "sb1"
		}
		vols[req.Name] = v
		writeJSON(w, 201, v)
	})
	mux.HandleFunc("GET /v1/volumes", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		var list []api.Volume // null when empty, as a careless server may answer
		for _, v := range vols {
			list = append(list, v)
		}
		writeJSON(w, 200, list)
	})
	mux.HandleFunc("GET /v1/volumes/{name}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		v, ok := vols[r.PathValue("name")]
		if !ok {
			writeJSON(w, 404, api.ErrorBody{Error: api.Error{Code: "not_found", Message: "volume not found"}})
			return
		}
		writeJSON(w, 200, v)
	})
	mux.HandleFunc("DELETE /v1/volumes/{name}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		v, ok := vols[r.PathValue("name")]
		switch {
		case !ok:
			writeJSON(w, 404, api.ErrorBody{Error: api.Error{Code: "not_found", Message: "volume not found"}})
		case v.AttachedTo != "":
			writeJSON(w, 409, api.ErrorBody{Error: api.Error{Code: "conflict", Message: "volume is attached to sandbox " + v.AttachedTo}})
		default:
			delete(vols, v.Name)
			w.WriteHeader(http.StatusNoContent)
		}
	})
	c := newTestClient(t, mux, "")
	ctx := context.Background()

	if vs, err := c.ListVolumes(ctx); err != nil || vs == nil || len(vs) != 0 {
		t.Fatalf("ListVolumes(empty) = %#v, %v", vs, err)
	}
	v, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", SizeBytes: 1 << 30, Inodes: 1000})
	if err != nil || v.Name != "data" || v.SizeBytes != 1<<30 || v.Inodes != 1000 || v.State != "available" {
		t.Fatalf("CreateVolume = %+v, %v", v, err)
	}
	if _, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data"}); !IsConflict(err) {
		t.Fatalf("duplicate: err = %v", err)
	}
	if _, err := c.CreateVolume(ctx, api.CreateVolumeRequest{}); !IsInvalid(err) {
		t.Fatalf("no name: err = %v", err)
	}
	if _, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: "busy"}); err != nil {
		t.Fatal(err)
	}
	if vs, err := c.ListVolumes(ctx); err != nil || len(vs) != 2 {
		t.Fatalf("ListVolumes = %+v, %v", vs, err)
	}
	if v, err := c.GetVolume(ctx, "data"); err != nil || v.ID != "vol-data" {
		t.Fatalf("GetVolume = %+v, %v", v, err)
	}
	if _, err := c.GetVolume(ctx, "nope"); !IsNotFound(err) {
		t.Fatalf("GetVolume(nope) err = %v", err)
	}
	if err := c.DeleteVolume(ctx, "busy"); !IsConflict(err) {
		t.Fatalf("DeleteVolume(attached) err = %v", err)
	}
	if err := c.DeleteVolume(ctx, "data"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteVolume(ctx, "data"); !IsNotFound(err) {
		t.Fatalf("DeleteVolume twice err = %v", err)
	}
}
