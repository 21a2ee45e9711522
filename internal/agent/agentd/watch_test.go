package agentd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
)

// startWatch runs a watch in the background and returns its events as
// they come, and a stop that ends it and returns its error.
func startWatch(t *testing.T, c *agent.Client, p string, recursive bool) (<-chan wire.WatchEvent, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	evs := make(chan wire.WatchEvent, 4096)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- c.Watch(ctx, p, recursive, func() { close(ready) }, func(ev wire.WatchEvent) error {
			evs <- ev
			return nil
		})
	}()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		done <- err
		return evs, func() error { return <-done }
	case <-time.After(10 * time.Second):
		t.Fatal("watch not ready")
	}
	return evs, func() error { cancel(); return <-done }
}

// expect reads events until it has seen want, in order (anything else in
// between fails).
func expect(t *testing.T, evs <-chan wire.WatchEvent, want ...string) {
	t.Helper()
	for _, w := range want {
		select {
		case ev := <-evs:
			got := ev.Type + " " + ev.Path
			if ev.OldPath != "" {
				got = ev.Type + " " + ev.OldPath + " " + ev.Path
			}
			if got != w {
				t.Fatalf("event %q, want %q", got, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event; want %q", w)
		}
	}
}

// sawAll reads events until each of want has been seen, in any order and
// among others (duplicates, writes).
func sawAll(t *testing.T, evs <-chan wire.WatchEvent, want ...string) {
	t.Helper()
	missing := map[string]bool{}
	for _, w := range want {
		missing[w] = true
	}
	var got []string
	for len(missing) > 0 {
		select {
		case ev := <-evs:
			delete(missing, ev.Type+" "+ev.Path)
			got = append(got, ev.Type+" "+ev.Path)
		case <-time.After(10 * time.Second):
			t.Fatalf("events %q lack %v", got, missing)
		}
	}
}

func quiet(t *testing.T, evs <-chan wire.WatchEvent) {
	t.Helper()
	select {
	case ev := <-evs:
		t.Fatalf("unexpected event %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestWatchEvents(t *testing.T) {
	a := startAgent(t)
	if err := os.MkdirAll(filepath.Join(a.root, "w/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := func(p string) string { return filepath.Join(a.root, p) }

	t.Run("flat", func(t *testing.T) {
		evs, stop := startWatch(t, a.client, "/w", false)
		writeFile(t, a.root, "w/f", "x")
		expect(t, evs, "create /w/f", "write /w/f")
		if err := os.Rename(r("w/f"), r("w/g")); err != nil {
			t.Fatal(err)
		}
		expect(t, evs, "rename /w/f /w/g")
		if err := os.Remove(r("w/g")); err != nil {
			t.Fatal(err)
		}
		expect(t, evs, "remove /w/g")
		writeFile(t, a.root, "w/sub/deep", "x") // not recursive: not seen
		quiet(t, evs)
		if err := os.Rename(r("w/sub/deep"), r("w/in")); err != nil { // moved in: a create
			t.Fatal(err)
		}
		expect(t, evs, "create /w/in")
		if err := os.Rename(r("w/in"), r("out")); err != nil { // moved out: a remove
			t.Fatal(err)
		}
		expect(t, evs, "remove /w/in")
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("recursive", func(t *testing.T) {
		evs, stop := startWatch(t, a.client, "/w", true)
		writeFile(t, a.root, "w/sub/f", "x")
		expect(t, evs, "create /w/sub/f", "write /w/sub/f")
		if err := os.Mkdir(r("w/new"), 0o755); err != nil {
			t.Fatal(err)
		}
		expect(t, evs, "create /w/new")
		writeFile(t, a.root, "w/new/f", "y")
		expect(t, evs, "create /w/new/f", "write /w/new/f")
		if err := os.Rename(r("w/new"), r("w/renamed")); err != nil {
			t.Fatal(err)
		}
		expect(t, evs, "rename /w/new /w/renamed")
		writeFile(t, a.root, "w/renamed/g", "z") // the watch follows the rename
		expect(t, evs, "create /w/renamed/g", "write /w/renamed/g")
		if err := os.RemoveAll(r("w/renamed")); err != nil {
			t.Fatal(err)
		}
		expect(t, evs, "remove /w/renamed/f", "remove /w/renamed/g", "remove /w/renamed")
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("new tree", func(t *testing.T) {
		// A directory that arrives with content (mkdir -p a/b/c; echo >
		// a/b/c/f, or a tree moved in whole): what is in it when its
		// watch is added is reported too.
		evs, stop := startWatch(t, a.client, "/w", true)
		writeFile(t, a.root, "staging/a/b/c/f", "x")
		if err := os.Rename(r("staging/a"), r("w/a")); err != nil {
			t.Fatal(err)
		}
		sawAll(t, evs, "create /w/a", "create /w/a/b", "create /w/a/b/c", "create /w/a/b/c/f")
		if err := os.MkdirAll(r("w/m/n/o"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, a.root, "w/m/n/o/f", "y")
		sawAll(t, evs, "create /w/m", "create /w/m/n", "create /w/m/n/o", "create /w/m/n/o/f")
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		os.RemoveAll(r("w/a"))
		os.RemoveAll(r("w/m"))
	})
	t.Run("directory removed", func(t *testing.T) {
		if err := os.Mkdir(r("gone"), 0o755); err != nil {
			t.Fatal(err)
		}
		_, stop := startWatch(t, a.client, "/gone", false)
		if err := os.Remove(r("gone")); err != nil {
			t.Fatal(err)
		}
		if err := stop(); err != nil {
			t.Fatalf("watch of a removed dir: %v", err)
		}
	})
	t.Run("bad paths", func(t *testing.T) {
		ctx := testCtx(t)
		nop := func(wire.WatchEvent) error { return nil }
		wantCategory(t, a.client.Watch(ctx, "/nope", false, nil, nop), errdefs.ErrNotFound)
		wantCategory(t, a.client.Watch(ctx, "/w/sub/f", false, nil, nop), errdefs.ErrNotFound)
		wantCategory(t, a.client.Watch(ctx, "rel", false, nil, nop), errdefs.ErrInvalid)
	})
	// Everything watched was given back.
	waitHeld(t, a.srv, 0, 0)
}

func waitHeld(t *testing.T, s *server, reqs, watches int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, w := s.watchBudget.held()
		if r == reqs && w == watches {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent holds %d watch requests and %d watches, want %d and %d", r, w, reqs, watches)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func setVar[T any](t *testing.T, p *T, v T) {
	old := *p
	*p = v
	t.Cleanup(func() { *p = old })
}

// TestWatchBounds: the per-request and per-agent caps refuse, and a
// client that goes ends its watch (its watches given back).
func TestWatchBounds(t *testing.T) {
	setVar(t, &maxWatchesPerReq, 5)
	setVar(t, &maxWatchRequests, 3)
	setVar(t, &maxWatchesPerAgent, 6)
	a := startAgent(t)
	for i := range 6 {
		if err := os.MkdirAll(filepath.Join(a.root, fmt.Sprintf("tree/d%d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(a.root, "small/a"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	nop := func(wire.WatchEvent) error { return nil }
	// 7 directories recursively: over the per-request cap.
	wantCategory(t, a.client.Watch(ctx, "/tree", true, nil, nop), errdefs.ErrTooLarge)
	waitHeld(t, a.srv, 0, 0)
	// Non-recursive it is one directory.
	_, stop1 := startWatch(t, a.client, "/tree", false)
	_, stop2 := startWatch(t, a.client, "/small", true) // 2 watches
	waitHeld(t, a.srv, 2, 3)
	_, stop3 := startWatch(t, a.client, "/small", true) // 2 more: 5 of 8
	// A fourth request: over the per-agent request cap.
	wantCategory(t, a.client.Watch(ctx, "/small", false, nil, nop), errdefs.ErrExhausted)
	stop3()
	waitHeld(t, a.srv, 2, 3)
	// Four directories more: within the per-request cap, over the
	// agent-wide one (3 held + 4 > 6).
	if err := os.MkdirAll(filepath.Join(a.root, "six/1/2/3"), 0o755); err != nil {
		t.Fatal(err)
	}
	wantCategory(t, a.client.Watch(ctx, "/six", true, nil, nop), errdefs.ErrExhausted)
	waitHeld(t, a.srv, 2, 3)
	for _, stop := range []func() error{stop1, stop2} {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	// The client went: its watchers ended and gave everything back.
	waitHeld(t, a.srv, 0, 0)
}

// TestWatchQueueOverflow: a full queue drops events and reports one
// overflow instead of growing.
func TestWatchQueueOverflow(t *testing.T) {
	w := &watcher{wake: make(chan struct{}, 1)}
	for i := range watchQueueLen + 100 {
		w.push(wire.WatchEvent{Type: wire.WatchCreate, Path: fmt.Sprintf("/f%d", i)})
	}
	if len(w.queue) != watchQueueLen || !w.overflow {
		t.Fatalf("queue %d (cap %d), overflow %v", len(w.queue), watchQueueLen, w.overflow)
	}
	// End to end: a small queue and a burst of changes.
	setVar(t, &watchQueueLen, 4)
	a := startAgent(t)
	if err := os.Mkdir(filepath.Join(a.root, "w"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	sawOverflow := make(chan struct{})
	block := make(chan struct{})
	ready := make(chan struct{})
	done := make(chan error, 1)
	first := true
	go func() {
		done <- a.client.Watch(ctx, "/w", false, func() { close(ready) }, func(ev wire.WatchEvent) error {
			if first { // hold the client back while the burst happens
				first = false
				<-block
			}
			if ev.Type == wire.WatchOverflow {
				close(sawOverflow)
				return errors.New("seen")
			}
			return nil
		})
	}()
	<-ready
	// Enough events to fill the socket's buffers and then the queue.
	for i := range 4000 {
		writeFile(t, a.root, "w/"+strings.Repeat("n", 200)+fmt.Sprint(i), "")
	}
	close(block)
	select {
	case <-sawOverflow:
	case err := <-done:
		// The callback closes sawOverflow before it ends the watch, so
		// both may be ready: only an end without it is a failure.
		select {
		case <-sawOverflow:
		default:
			t.Fatalf("watch ended without an overflow: %v", err)
		}
		done <- err
	case <-time.After(20 * time.Second):
		t.Fatal("no overflow event")
	}
	cancel()
	<-done
	waitHeld(t, a.srv, 0, 0)
}

func FuzzDecodeWatchEvent(f *testing.F) {
	f.Add([]byte(`{"type":"create","path":"/a"}`))
	f.Add([]byte(`{"type":"rename","path":"/b","old_path":"/a","is_dir":true}`))
	f.Add([]byte(`{"type":"overflow"}`))
	f.Add([]byte(`{"type":"x","path":"rel"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := agent.DecodeWatchEvent(b)
		if err != nil {
			return
		}
		switch ev.Type {
		case wire.WatchOverflow:
			if ev.Path != "" {
				t.Fatal("overflow with a path")
			}
		case wire.WatchCreate, wire.WatchWrite, wire.WatchRemove, wire.WatchRename:
			if ev.Path == "" || ev.Path[0] != '/' || strings.IndexByte(ev.Path, 0) >= 0 || len(ev.Path) > wire.MaxPathBytes {
				t.Fatalf("accepted path %q", ev.Path)
			}
			if (ev.Type == wire.WatchRename) != (ev.OldPath != "") {
				t.Fatalf("old path %q on %s", ev.OldPath, ev.Type)
			}
		default:
			t.Fatalf("accepted type %q", ev.Type)
		}
	})
}
