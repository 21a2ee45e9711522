package client

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// forkFake answers the fork, snapshot, copy, export, pool and apply routes
// and records what it was sent.
type forkFake struct {
	mu        sync.Mutex
	fork      api.ForkRequest
	forkID    string
	snapReq   api.CreateSnapshotRequest
	listPath  string
	deleted   string
	restored  string
	export    api.ExportRequest
	exportCT  string
	copyReq   api.CopyRequest
	pool      api.PoolRequest
	poolName  string
	apply     api.ApplyRequest
	snapshots map[string]api.Snapshot
}

func (f *forkFake) handler() http.Handler {
	f.snapshots = map[string]api.Snapshot{
		"snap1": {ID: "snap1", Name: "before", SandboxID: "sb1", Template: "base", SizeBytes: 4096, CreatedAt: time.Unix(1e9, 0).UTC()},
	}
	notFound := func(w http.ResponseWriter, what string) {
		writeJSON(w, 404, api.ErrorBody{Error: api.Error{Code: "not_found", Message: what + " not found"}})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes/{id}/fork", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.forkID = r.PathValue("id")
		_ = json.NewDecoder(r.Body).Decode(&f.fork)
		n := max(f.fork.Count, 1)
		resp := api.ForkResponse{Children: []api.Sandbox{}, FreezeMS: 1.5}
		for i := range n {
			resp.Children = append(resp.Children, api.Sandbox{ID: "child" + string(rune('1'+i)), State: "running",
				Lineage: &api.Lineage{Parent: f.forkID}})
		}
		writeJSON(w, 201, resp)
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/snapshots", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		_ = json.NewDecoder(r.Body).Decode(&f.snapReq)
		writeJSON(w, 201, api.Snapshot{ID: "snap2", Name: f.snapReq.Name, SandboxID: r.PathValue("id")})
	})
	list := func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.listPath = r.URL.Path
		if r.PathValue("id") == "empty" {
			w.Write([]byte("null"))
			return
		}
		writeJSON(w, 200, []api.Snapshot{f.snapshots["snap1"]})
	}
	mux.HandleFunc("GET /v1/sandboxes/{id}/snapshots", list)
	mux.HandleFunc("GET /v1/snapshots", list)
	mux.HandleFunc("GET /v1/snapshots/{id}", func(w http.ResponseWriter, r *http.Request) {
		s, ok := f.snapshots[r.PathValue("id")]
		if !ok {
			notFound(w, "snapshot "+r.PathValue("id"))
			return
		}
		writeJSON(w, 200, s)
	})
	mux.HandleFunc("DELETE /v1/snapshots/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.deleted = r.PathValue("id")
		f.mu.Unlock()
		w.WriteHeader(204)
	})
	mux.HandleFunc("POST /v1/snapshots/{id}/restore", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.restored = r.PathValue("id")
		f.mu.Unlock()
		writeJSON(w, 200, api.Sandbox{ID: "sb1", State: "running"})
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/export", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		_ = json.NewDecoder(r.Body).Decode(&f.export)
		f.exportCT = r.Header.Get("Content-Type")
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-tar")
		io.WriteString(w, "TAR:"+strings.Join(f.export.Paths, ","))
	})
	mux.HandleFunc("POST /v1/copy", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		_ = json.NewDecoder(r.Body).Decode(&f.copyReq)
		f.mu.Unlock()
		w.WriteHeader(204)
	})
	mux.HandleFunc("PUT /v1/templates/{name}/pool", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		_ = json.NewDecoder(r.Body).Decode(&f.pool)
		f.poolName = r.PathValue("name")
		writeJSON(w, 200, api.Pool{Template: f.poolName, Min: f.pool.Min})
	})
	mux.HandleFunc("GET /v1/templates/{name}/pool", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, api.Pool{Template: r.PathValue("name"), Min: 2, Ready: 2, Hits: 7, Misses: 1})
	})
	mux.HandleFunc("GET /v1/pools", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("null"))
	})
	mux.HandleFunc("POST /v1/apply", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		_ = json.NewDecoder(r.Body).Decode(&f.apply)
		spec := f.apply.Spec
		f.mu.Unlock()
		enc := json.NewEncoder(w)
		_ = enc.Encode(api.BuildEvent{Step: 1, Stream: "stdout", Data: []byte("step 1 cached\n")})
		if strings.Contains(spec, "fail") {
			_ = enc.Encode(api.BuildEvent{Step: 2, Error: &api.Error{Code: "invalid_argument", Message: "run failed"}})
			return
		}
		_ = enc.Encode(api.BuildEvent{Template: &api.Template{Name: "py"}})
	})
	return mux
}

func TestForkAndSnapshots(t *testing.T) {
	f := &forkFake{}
	c := newTestClient(t, f.handler(), "")
	ctx := t.Context()

	fr, err := c.Fork(ctx, "dev/1", api.ForkRequest{Count: 3, Persistent: true, TimeoutSeconds: 60, NamePrefix: "try"})
	if err != nil {
		t.Fatal(err)
	}
	if len(fr.Children) != 3 || fr.Children[0].Lineage.Parent != "dev/1" || fr.FreezeMS != 1.5 {
		t.Errorf("fork = %+v", fr)
	}
	if f.forkID != "dev/1" || f.fork.Count != 3 || !f.fork.Persistent || f.fork.NamePrefix != "try" {
		t.Errorf("fork request %q %+v", f.forkID, f.fork)
	}

	s, err := c.CreateSnapshot(ctx, "sb1", api.CreateSnapshotRequest{Name: "n", RetentionSeconds: 3600})
	if err != nil || s.ID != "snap2" || s.SandboxID != "sb1" || f.snapReq.RetentionSeconds != 3600 {
		t.Fatalf("create snapshot = %+v, %v (req %+v)", s, err, f.snapReq)
	}
	ss, err := c.ListSnapshots(ctx, "")
	if err != nil || len(ss) != 1 || f.listPath != "/v1/snapshots" {
		t.Errorf("list all = %+v, %v via %s", ss, err, f.listPath)
	}
	ss, err = c.ListSnapshots(ctx, "sb1")
	if err != nil || len(ss) != 1 || f.listPath != "/v1/sandboxes/sb1/snapshots" {
		t.Errorf("list sb1 = %+v, %v via %s", ss, err, f.listPath)
	}
	ss, err = c.ListSnapshots(ctx, "empty")
	if err != nil || ss == nil || len(ss) != 0 {
		t.Errorf("list of null = %#v, %v", ss, err)
	}
	if s, err := c.GetSnapshot(ctx, "snap1"); err != nil || s.SizeBytes != 4096 {
		t.Errorf("get = %+v, %v", s, err)
	}
	if _, err := c.GetSnapshot(ctx, "nope"); !IsNotFound(err) {
		t.Errorf("get unknown: %v", err)
	}
	if err := c.DeleteSnapshot(ctx, "snap1"); err != nil || f.deleted != "snap1" {
		t.Errorf("delete: %v %q", err, f.deleted)
	}
	if sb, err := c.RestoreSnapshot(ctx, "snap1"); err != nil || sb.ID != "sb1" || f.restored != "snap1" {
		t.Errorf("restore = %+v, %v", sb, err)
	}
}

func TestExportAndCopy(t *testing.T) {
	f := &forkFake{}
	c := newTestClient(t, f.handler(), "")
	var buf bytes.Buffer
	if err := c.Export(t.Context(), "child", []string{"/work/out", "/work/log.txt"}, &buf); err != nil {
		t.Fatal(err)
	}
	if buf.String() != "TAR:/work/out,/work/log.txt" || f.exportCT != "application/json" {
		t.Errorf("export wrote %q (content type %q)", buf.String(), f.exportCT)
	}
	if err := c.Export(t.Context(), "child", nil, &buf); err == nil {
		t.Error("export of no paths succeeded")
	}
	req := api.CopyRequest{From: "child", FromPath: "/work/out", To: "parent", ToPath: "/work"}
	if err := c.Copy(t.Context(), req); err != nil || f.copyReq != req {
		t.Errorf("copy: %v, sent %+v", err, f.copyReq)
	}
}

func TestPoolsAndApply(t *testing.T) {
	f := &forkFake{}
	c := newTestClient(t, f.handler(), "")
	ctx := t.Context()
	p, err := c.SetPool(ctx, "py", 4)
	if err != nil || p.Min != 4 || f.pool.Min != 4 || f.poolName != "py" {
		t.Fatalf("set pool = %+v, %v", p, err)
	}
	// Min 0 must be sent, not omitted: it removes the pool.
	if _, err := c.SetPool(ctx, "py", 0); err != nil || f.pool.Min != 0 {
		t.Fatalf("set pool 0: %v", err)
	}
	if p, err := c.GetPool(ctx, "py"); err != nil || p.Hits != 7 || p.Ready != 2 {
		t.Errorf("get pool = %+v, %v", p, err)
	}
	if ps, err := c.ListPools(ctx); err != nil || ps == nil || len(ps) != 0 {
		t.Errorf("list pools of null = %#v, %v", ps, err)
	}

	var progress bytes.Buffer
	tmpl, err := c.Apply(ctx, api.ApplyRequest{Spec: "name: py\n", Files: []byte("tar")}, &progress)
	if err != nil || tmpl.Name != "py" || progress.String() != "step 1 cached\n" {
		t.Fatalf("apply = %+v, %v, progress %q", tmpl, err, progress.String())
	}
	if f.apply.Spec != "name: py\n" || string(f.apply.Files) != "tar" {
		t.Errorf("apply request = %+v", f.apply)
	}
	_, err = c.Apply(ctx, api.ApplyRequest{Spec: "fail"}, nil)
	if err == nil || err.Error() != "step 2: run failed" || !IsInvalid(err) {
		t.Errorf("failed apply: %v", err)
	}
}
