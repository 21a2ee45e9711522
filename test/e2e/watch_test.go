package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// TestFilesWatch, on runc and runsc, over NDJSON and WebSocket: a watch
// reports create, write, rename and remove in order; recursive watches
// see new subdirectories' files (also those made together with their
// directories: mkdir -p a/b/c; echo > a/b/c/f), flat ones do not; the stream ends when
// the client goes and the agent's watch budget comes back (a new watch
// after many ended ones still works).
func TestFilesWatch(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	type watchFn func(ctx context.Context, id, path string, recursive bool, each func(api.WatchEvent) error) error
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: rt})
			if err != nil {
				t.Fatal(err)
			}
			defer d.c.DeleteSandbox(ctx, sb.ID, true)
			execOut(t, d, sb.ID, "mkdir", "-p", "/w/sub")
			start := func(fn watchFn, recursive bool) (<-chan api.WatchEvent, func()) {
				t.Helper()
				wctx, cancel := context.WithCancel(ctx)
				evs := make(chan api.WatchEvent, 1024)
				done := make(chan error, 1)
				go func() {
					done <- fn(wctx, sb.ID, "/w", recursive, func(ev api.WatchEvent) error { evs <- ev; return nil })
				}()
				select {
				case ev := <-evs:
					if ev.Type != api.WatchReady {
						t.Fatalf("first event %+v, want ready", ev)
					}
				case err := <-done:
					t.Fatalf("watch: %v", err)
				case <-time.After(30 * time.Second):
					t.Fatal("no ready event")
				}
				return evs, func() {
					cancel()
					if err := <-done; err != nil {
						t.Errorf("watch ended with %v", err)
					}
				}
			}
			expect := func(evs <-chan api.WatchEvent, want ...string) {
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
					case <-time.After(30 * time.Second):
						t.Fatalf("no event, want %q", w)
					}
				}
			}
			sawAll := func(evs <-chan api.WatchEvent, want ...string) {
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
					case <-time.After(30 * time.Second):
						t.Fatalf("events %q lack %v", got, missing)
					}
				}
			}
			for name, fn := range map[string]watchFn{"ndjson": d.c.Watch, "websocket": d.c.WatchWS} {
				evs, stop := start(fn, false)
				execOut(t, d, sb.ID, "sh", "-c", "echo x > /w/f && mv /w/f /w/g && rm /w/g && echo y > /w/sub/deep && echo z > /w/last")
				// The subdirectory's file is not reported: the next event
				// is /w/last's.
				expect(evs, "create /w/f", "write /w/f", "rename /w/f /w/g", "remove /w/g", "create /w/last", "write /w/last")
				stop()
				execOut(t, d, sb.ID, "rm", "-rf", "/w/sub/deep", "/w/last")

				evs, stop = start(fn, true)
				execOut(t, d, sb.ID, "sh", "-c", "echo x > /w/sub/f && mkdir /w/new")
				expect(evs, "create /w/sub/f", "write /w/sub/f", "create /w/new")
				execOut(t, d, sb.ID, "sh", "-c", "echo y > /w/new/f && rm -r /w/new /w/sub/f")
				expect(evs, "create /w/new/f", "write /w/new/f", "remove /w/new/f", "remove /w/new", "remove /w/sub/f")
				// Directories made together with their content: the
				// scan on add reports what is in each new directory.
				execOut(t, d, sb.ID, "sh", "-c", "mkdir -p /w/a/b/c && echo > /w/a/b/c/f")
				sawAll(evs, "create /w/a", "create /w/a/b", "create /w/a/b/c", "create /w/a/b/c/f")
				stop()
				execOut(t, d, sb.ID, "rm", "-rf", "/w/a")
				t.Logf("%s: ok", name)
			}
			// Ended watches gave their budget back: more than the
			// agent's 16 at once, one after another, all start.
			for range 20 {
				_, stop := start(d.c.Watch, true)
				stop()
			}
			// Bad input: a missing dir is a 404 before streaming; a file
			// is not a directory.
			err = d.c.Watch(ctx, sb.ID, "/nope", false, func(api.WatchEvent) error { return nil })
			if !client.IsNotFound(err) {
				t.Errorf("watch of a missing dir: %v", err)
			}
			execOut(t, d, sb.ID, "touch", "/w/file")
			err = d.c.Watch(ctx, sb.ID, "/w/file", false, func(api.WatchEvent) error { return nil })
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Status/100 != 4 {
				t.Errorf("watch of a file: %v", err)
			}
			// The CLI prints the events.
			if so, se, code := d.cli("fs", "watch", "--help"); code != 0 || !strings.Contains(so, "rename") {
				t.Errorf("fs watch --help: %d %s", code, se)
			}
		})
	}
}
