package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// pages collects a list page by page, failing on a cursor that does not
// move or on more pages than items.
func pages[T any](t *testing.T, limit int, list func(store.Page) ([]T, string, error)) []T {
	t.Helper()
	var out []T
	p := store.Page{Limit: limit}
	for n := 0; ; n++ {
		items, next, err := list(p)
		if err != nil {
			t.Fatalf("page %d (cursor %q): %v", n, p.Cursor, err)
		}
		if len(items) > limit {
			t.Fatalf("page %d has %d items, limit %d", n, len(items), limit)
		}
		out = append(out, items...)
		if next == "" {
			return out
		}
		if next == p.Cursor || n > 10000 {
			t.Fatalf("cursor does not advance: %q", next)
		}
		if len(items) == 0 {
			t.Fatalf("page %d is empty but has a next cursor", n)
		}
		p.Cursor = next
	}
}

// testPaging: every list pages in its stable order, pages add up to the
// whole list, the last page has no cursor, and a cursor that is not one of
// the list's is ErrInvalid.
func testPaging(t *testing.T, s store.Store) {
	ctx := context.Background()
	// Creation times repeat, so the id breaks ties.
	for i := range 7 {
		id := fmt.Sprintf("p%d", 6-i)
		must(t, s.CreateSandbox(ctx, newSandbox(id, "t", id, sandbox.StateRunning, at(time.Duration(i/2)*time.Second))))
		must(t, s.CreateVolume(ctx, &store.Volume{ID: "v" + id, Name: "vol" + id, Tenant: "t", State: store.VolumeAvailable,
			CreatedAt: at(time.Duration(i/3) * time.Second)}))
		must(t, s.CreateSnapshot(ctx, &store.Snapshot{ID: "s" + id, Name: "snap" + id, Tenant: "t", SandboxID: "p0",
			CreatedAt: at(time.Duration(i/2) * time.Second)}))
		must(t, s.PutTemplate(ctx, &store.Template{Name: "tpl" + id, Layers: []string{}}))
		must(t, s.CreateAPIKey(ctx, &store.APIKey{ID: "k" + id, Tenant: "t", Hash: []byte(id), CreatedAt: at(time.Duration(i/4) * time.Second)}))
		must(t, s.AppendEvent(ctx, newEvent("p6", i)))
	}
	type list struct {
		name string
		all  func(store.Page) ([]string, string, error)
	}
	keys := func(n int, key func(int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = key(i)
		}
		return out
	}
	lists := []list{
		{"sandboxes", func(p store.Page) ([]string, string, error) {
			v, next, err := s.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner}, p)
			return keys(len(v), func(i int) string { return v[i].ID }), next, err
		}},
		{"volumes", func(p store.Page) ([]string, string, error) {
			v, next, err := s.ListVolumes(ctx, store.VolumeFilter{Owner: store.OwnedBy("t")}, p)
			return keys(len(v), func(i int) string { return v[i].ID }), next, err
		}},
		{"snapshots", func(p store.Page) ([]string, string, error) {
			v, next, err := s.ListSnapshots(ctx, store.SnapshotFilter{Owner: store.OwnedBy("t"), SandboxID: "p0"}, p)
			return keys(len(v), func(i int) string { return v[i].ID }), next, err
		}},
		{"templates", func(p store.Page) ([]string, string, error) {
			v, next, err := s.ListTemplates(ctx, p)
			return keys(len(v), func(i int) string { return v[i].Name }), next, err
		}},
		{"api keys", func(p store.Page) ([]string, string, error) {
			v, next, err := s.ListAPIKeys(ctx, store.OwnedBy("t"), p)
			return keys(len(v), func(i int) string { return v[i].ID }), next, err
		}},
		{"events", func(p store.Page) ([]string, string, error) {
			v, next, err := s.ListEvents(ctx, store.OwnedBy("t"), "p6", 0, p)
			return keys(len(v), func(i int) string { return fmt.Sprint(v[i].ID) }), next, err
		}},
	}
	wantOrder := map[string][]string{
		"sandboxes": {"p5", "p6", "p3", "p4", "p1", "p2", "p0"},
		"volumes":   {"vp4", "vp5", "vp6", "vp1", "vp2", "vp3", "vp0"},
		"snapshots": {"sp5", "sp6", "sp3", "sp4", "sp1", "sp2", "sp0"},
		"templates": {"tplp0", "tplp1", "tplp2", "tplp3", "tplp4", "tplp5", "tplp6"},
		"api keys":  {"kp3", "kp4", "kp5", "kp6", "kp0", "kp1", "kp2"},
	}
	var cursors []string
	for _, l := range lists {
		t.Run(l.name, func(t *testing.T) {
			whole, next, err := l.all(store.Page{})
			must(t, err)
			if next != "" || len(whole) != 7 {
				t.Fatalf("whole list: %v, next %q", whole, next)
			}
			if w, ok := wantOrder[l.name]; ok && !reflect.DeepEqual(whole, w) {
				t.Errorf("order %v, want %v", whole, w)
			}
			for _, limit := range []int{1, 2, 3, 6, 7, 8, 1000} {
				if got := pages(t, limit, l.all); !reflect.DeepEqual(got, whole) {
					t.Errorf("limit %d: pages give %v, want %v", limit, got, whole)
				}
			}
			_, c, err := l.all(store.Page{Limit: 1})
			must(t, err)
			cursors = append(cursors, c)
			for _, bad := range []string{"x", "!!!!", "cGFnZQ", c + "A", "=" + c, "c2FuZGJveGVzfDAxfHg"} {
				if _, _, err := l.all(store.Page{Limit: 1, Cursor: bad}); !errors.Is(err, errdefs.ErrInvalid) {
					t.Errorf("cursor %q: err %v, want invalid", bad, err)
				}
			}
			if _, _, err := l.all(store.Page{Limit: -1}); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("negative limit: err %v, want invalid", err)
			}
		})
	}
	// A cursor of one list is no cursor of another.
	for i, l := range lists {
		other := cursors[(i+1)%len(cursors)]
		if _, _, err := l.all(store.Page{Limit: 1, Cursor: other}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s with another list's cursor: err %v, want invalid", l.name, err)
		}
	}
}

// testPagingConcurrentInserts: paging while others insert never returns a
// sandbox twice and never skips one that existed throughout.
func testPagingConcurrentInserts(t *testing.T, s store.Store) {
	ctx := context.Background()
	before := map[string]bool{}
	for i := range 60 {
		id := fmt.Sprintf("old-%02d", i)
		must(t, s.CreateSandbox(ctx, newSandbox(id, "t", "", sandbox.StateRunning, at(time.Duration(i%20)*time.Second))))
		before[id] = true
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errc := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 150 {
			select {
			case <-stop:
				return
			default:
			}
			// Before, among and after the existing ones, ties included.
			id := fmt.Sprintf("new-%03d", i)
			sb := newSandbox(id, "t", "", sandbox.StateRunning, at(time.Duration(i%25-2)*time.Second))
			if err := s.CreateSandbox(ctx, sb); err != nil {
				errc <- err
				return
			}
		}
	}()
	for round := range 5 {
		seen := map[string]int{}
		got := pages(t, 4, func(p store.Page) ([]*sandbox.Sandbox, string, error) {
			return s.ListSandboxes(ctx, store.SandboxFilter{Owner: store.OwnedBy("t")}, p)
		})
		for _, sb := range got {
			if seen[sb.ID]++; seen[sb.ID] > 1 {
				t.Errorf("round %d: %s returned twice", round, sb.ID)
			}
		}
		for id := range before {
			if seen[id] == 0 {
				t.Errorf("round %d: %s skipped", round, id)
			}
		}
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
}
