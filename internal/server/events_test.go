package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/events"
)

// sseFrame is one frame of an event stream.
type sseFrame struct {
	id, event, data, comment, retry string
}

// sseStream reads frames of an open stream in a goroutine.
type sseStream struct {
	resp   *http.Response
	frames chan sseFrame
	cancel context.CancelFunc
}

// openStream opens path as an event stream with cred; it must answer 200.
func (e *tenv) openStream(cred, path, lastID string) *sseStream {
	e.t.Helper()
	st, code, body := e.tryStream(cred, path, lastID)
	if code != 200 {
		e.t.Fatalf("GET %s as a stream: %d %s", path, code, body)
	}
	return st
}

func (e *tenv) tryStream(cred, path, lastID string) (*sseStream, int, string) {
	e.t.Helper()
	base := e.tcp.URL
	if cred == "local" {
		base = e.local.URL
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
	req.Header.Set("Accept", "text/event-stream")
	if cred != "local" {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		defer cancel()
		defer resp.Body.Close()
		var b strings.Builder
		bufio.NewReader(resp.Body).WriteTo(&b)
		return nil, resp.StatusCode, b.String()
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		e.t.Fatalf("stream Content-Type %q", ct)
	}
	st := &sseStream{resp: resp, frames: make(chan sseFrame, 1024), cancel: cancel}
	e.t.Cleanup(st.close)
	go func() {
		defer close(st.frames)
		sc := bufio.NewScanner(resp.Body)
		var f sseFrame
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				st.frames <- f
				f = sseFrame{}
			case strings.HasPrefix(line, ":"):
				f.comment = strings.TrimSpace(line[1:])
			default:
				k, v, _ := strings.Cut(line, ": ")
				switch k {
				case "id":
					f.id = v
				case "event":
					f.event = v
				case "data":
					f.data = v
				case "retry":
					f.retry = v
				}
			}
		}
	}()
	return st, 200, ""
}

func (s *sseStream) close() { s.cancel(); s.resp.Body.Close() }

// events reads event frames until n arrived or d passed.
func (s *sseStream) events(t *testing.T, n int, d time.Duration) []api.Event {
	t.Helper()
	var out []api.Event
	timeout := time.After(d)
	for len(out) < n {
		select {
		case f, ok := <-s.frames:
			if !ok {
				return out
			}
			if f.data == "" {
				continue
			}
			var ev api.Event
			if err := json.Unmarshal([]byte(f.data), &ev); err != nil {
				t.Fatalf("frame data %q: %v", f.data, err)
			}
			if f.id != strconv.FormatInt(ev.ID, 10) || f.event != ev.Type {
				t.Fatalf("frame id %q event %q for event %d %s", f.id, f.event, ev.ID, ev.Type)
			}
			out = append(out, ev)
		case <-timeout:
			return out
		}
	}
	return out
}

// ended reports whether the stream ends within d (frames before the end
// are dropped).
func (s *sseStream) ended(d time.Duration) bool {
	timeout := time.After(d)
	for {
		select {
		case _, ok := <-s.frames:
			if !ok {
				return true
			}
		case <-timeout:
			return false
		}
	}
}

// TestEventStreamScopes: a tenant's /v1/events stream carries its own
// sandboxes' events only, from the start and live; another tenant's
// sandbox as a filter is 404; a lease reads its own sandbox's stream, not
// another's nor /v1/events; the JSON page agrees with the stream.
func TestEventStreamScopes(t *testing.T) {
	e := newTenv(t)
	e.tenant("a")
	e.tenant("b")
	ka := e.key("local", "a", "admin").Key
	kb := e.key("local", "b", "admin").Key
	sa := e.sandbox(ka, `{}`)
	sb := e.sandbox(kb, `{}`)

	st := e.openStream(ka, "/v1/events", "")
	first := st.events(t, 2, 5*time.Second)
	for _, ev := range first {
		if ev.SandboxID != sa.ID {
			t.Fatalf("tenant a's stream carried %+v", ev)
		}
	}
	if len(first) == 0 {
		t.Fatal("tenant a's stream carried none of its events")
	}
	// Live: b's new sandbox never appears, a's does.
	e.sandbox(kb, `{}`)
	sa2 := e.sandbox(ka, `{}`)
	live := st.events(t, 1, 10*time.Second)
	if len(live) == 0 || live[0].SandboxID != sa2.ID {
		t.Fatalf("live events %+v, want one of %s", live, sa2.ID)
	}
	more := st.events(t, 100, 500*time.Millisecond)
	for _, ev := range append(live, more...) {
		if ev.SandboxID != sa.ID && ev.SandboxID != sa2.ID {
			t.Fatalf("tenant a's stream carried %+v", ev)
		}
	}
	// The JSON page of the same request is the same events.
	var page []api.Event
	e.must(ka, "GET", "/v1/events", "", 200, &page)
	for _, ev := range page {
		if ev.SandboxID != sa.ID && ev.SandboxID != sa2.ID {
			t.Fatalf("tenant a's page carried %+v", ev)
		}
	}
	if got, want := len(page), len(first)+len(live)+len(more); got != want {
		t.Fatalf("page has %d events, the stream %d", got, want)
	}
	// Filters: b's sandbox is not found for a, by id or name.
	e.must(ka, "GET", "/v1/events?sandbox="+sb.ID, "", 404, nil)
	if _, code, _ := e.tryStream(ka, "/v1/events?sandbox="+sb.ID, ""); code != 404 {
		t.Fatalf("a's stream of b's sandbox: %d", code)
	}
	if _, code, _ := e.tryStream(ka, "/v1/sandboxes/"+sb.ID+"/events", ""); code != 404 {
		t.Fatalf("a's stream of b's sandbox events: %d", code)
	}
	e.must(ka, "GET", "/v1/events?sandbox="+sa.ID+"&type=no-such-type", "", 200, &page)
	if len(page) != 0 {
		t.Fatalf("type filter: %+v", page)
	}
	// A lease: its own sandbox only.
	ls := e.openStream(sa.LeaseToken, "/v1/sandboxes/"+sa.ID+"/events", "")
	for _, ev := range ls.events(t, 100, time.Second) {
		if ev.SandboxID != sa.ID {
			t.Fatalf("lease stream carried %+v", ev)
		}
	}
	for _, path := range []string{"/v1/events", "/v1/sandboxes/" + sa2.ID + "/events", "/v1/sandboxes/" + sb.ID + "/events"} {
		if _, code, body := e.tryStream(sa.LeaseToken, path, ""); code != 403 && code != 404 {
			t.Fatalf("lease of %s on %s: %d %s", sa.ID, path, code, body)
		}
	}
	// The host admin sees both tenants.
	var all []api.Event
	e.must("local", "GET", "/v1/events", "", 200, &all)
	seen := map[string]bool{}
	for _, ev := range all {
		seen[ev.SandboxID] = true
	}
	if !seen[sa.ID] || !seen[sb.ID] {
		t.Fatalf("host admin's events miss a tenant: %v", seen)
	}
}

// TestEventStreamResume: Last-Event-ID (or after=) starts exactly after
// that id; a heartbeat comes when idle; the first frame asks for a retry.
func TestEventStreamResume(t *testing.T) {
	e := newTenv(t)
	e.srv.EventPing = 100 * time.Millisecond
	for range 3 {
		e.sandbox("local", `{}`)
	}
	var all []api.Event
	e.must("local", "GET", "/v1/events", "", 200, &all)
	if len(all) < 4 {
		t.Fatalf("only %d events", len(all))
	}
	mid := all[len(all)/2].ID
	for _, tc := range []struct{ path, last string }{
		{"/v1/events", strconv.FormatInt(mid, 10)},
		{"/v1/events?after=" + strconv.FormatInt(mid, 10), ""},
		{"/v1/events?after=1", strconv.FormatInt(mid, 10)}, // the header wins
	} {
		st := e.openStream("local", tc.path, tc.last)
		f := <-st.frames
		if f.retry != "2000" {
			t.Fatalf("first frame %+v, want retry: 2000", f)
		}
		got := st.events(t, len(all), 2*time.Second)
		var want []int64
		for _, ev := range all {
			if ev.ID > mid {
				want = append(want, ev.ID)
			}
		}
		if fmt.Sprint(ids(got)) != fmt.Sprint(want) {
			t.Fatalf("%s (Last-Event-ID %q): got %v, want %v", tc.path, tc.last, ids(got), want)
		}
		pinged := false
		for deadline := time.After(3 * time.Second); !pinged; {
			select {
			case f := <-st.frames:
				pinged = f.comment == "ping"
			case <-deadline:
				t.Fatal("no heartbeat on an idle stream")
			}
		}
		st.close()
	}
}

// TestEventStreamFromLatest: after=latest replays nothing of the history
// (a page is empty, a stream holds only what comes next), and a
// Last-Event-ID, as on a reconnect, still wins over it.
func TestEventStreamFromLatest(t *testing.T) {
	e := newTenv(t)
	for range 3 {
		e.sandbox("local", `{}`)
	}
	var all, page []api.Event
	e.must("local", "GET", "/v1/events", "", 200, &all)
	e.must("local", "GET", "/v1/events?after=latest", "", 200, &page)
	if len(all) < 3 || len(page) != 0 {
		t.Fatalf("history %d events, after=latest page %v", len(all), ids(page))
	}
	st := e.openStream("local", "/v1/events?after=latest", "")
	<-st.frames // retry:
	sb := e.sandbox("local", `{}`)
	got := st.events(t, 1, 5*time.Second)
	if len(got) == 0 || got[0].SandboxID != sb.ID || got[0].ID <= all[len(all)-1].ID {
		t.Fatalf("after=latest streamed %+v first, want the new sandbox %s's event", got, sb.ID)
	}
	st.close()
	st = e.openStream("local", "/v1/events?after=latest", strconv.FormatInt(all[0].ID, 10))
	<-st.frames
	if got := st.events(t, 1, 5*time.Second); len(got) == 0 || got[0].ID != all[1].ID {
		t.Fatalf("Last-Event-ID %d with after=latest: %v, want %d first", all[0].ID, ids(got), all[1].ID)
	}
	st.close()
}

func ids(evs []api.Event) []int64 {
	var out []int64
	for _, ev := range evs {
		out = append(out, ev.ID)
	}
	return out
}

// TestEventStreamEnds: a stream ends when its key is revoked, when its
// lease's sandbox stops, and at CloseStreams; a credential's streams are
// capped; bad positions and filters are 400.
func TestEventStreamEnds(t *testing.T) {
	old := credRecheck.Load()
	credRecheck.Store(int64(100 * time.Millisecond))
	t.Cleanup(func() { credRecheck.Store(old) })
	e := newTenv(t)
	e.tenant("a")
	k := e.key("local", "a", "admin")
	sb := e.sandbox(k.Key, `{}`)

	lease := e.openStream(sb.LeaseToken, "/v1/sandboxes/"+sb.ID+"/events", "")
	e.must(k.Key, "POST", "/v1/sandboxes/"+sb.ID+"/stop", "", 0, nil)
	if !lease.ended(5 * time.Second) {
		t.Fatal("a lease's stream outlived its sandbox's stop")
	}

	st := e.openStream(k.Key, "/v1/events", "")
	e.must("local", "DELETE", "/v1/keys/"+k.ID, "", 200, nil)
	if !st.ended(5 * time.Second) {
		t.Fatal("a revoked key's stream did not end")
	}
	if _, code, _ := e.tryStream(k.Key, "/v1/events", ""); code != 401 {
		t.Fatalf("revoked key's new stream: %d", code)
	}

	k2 := e.key("local", "a", "admin").Key
	for _, bad := range []struct{ path, last string }{
		{"/v1/events", "x"}, {"/v1/events", "-1"}, {"/v1/events", "99999999999999999999"},
		{"/v1/events?after=1e3", ""}, {"/v1/events?type=a%0Ab", ""}, {"/v1/events?sandbox=", ""},
		{"/v1/events?" + strings.Repeat("type=x&", events.MaxEventFilters+1), ""},
	} {
		if _, code, body := e.tryStream(k2, bad.path, bad.last); code != 400 || !strings.Contains(body, "invalid_argument") {
			t.Errorf("%s (Last-Event-ID %q): %d %s, want 400 invalid_argument", bad.path, bad.last, code, body)
		}
	}
	var open []*sseStream
	for range events.MaxStreamsPerKey {
		open = append(open, e.openStream(k2, "/v1/events", ""))
	}
	if _, code, body := e.tryStream(k2, "/v1/events", ""); code != 429 {
		t.Fatalf("stream over the cap: %d %s", code, body)
	}
	open[0].close()
	var next *sseStream
	for deadline := time.Now().Add(5 * time.Second); next == nil; {
		st, code, _ := e.tryStream(k2, "/v1/events", "")
		switch {
		case code == 200:
			next = st
		case time.Now().After(deadline):
			t.Fatalf("a closed stream's place was not freed: %d", code)
		default:
			time.Sleep(50 * time.Millisecond)
		}
	}
	e.srv.CloseStreams()
	for i, st := range append(open[1:], next) {
		if !st.ended(5 * time.Second) {
			t.Fatalf("stream %d outlived CloseStreams", i)
		}
	}
	if _, code, _ := e.tryStream(k2, "/v1/events", ""); code != 503 {
		t.Fatalf("stream after CloseStreams: %d", code)
	}
}

// TestEventStreamBehindEnds: a stream that never catches up (a long
// history read a page at a time) is still re-checked: its key revoked,
// it ends long before the backlog is sent.
func TestEventStreamBehindEnds(t *testing.T) {
	oldRecheck := credRecheck.Load()
	credRecheck.Store(int64(50 * time.Millisecond))
	t.Cleanup(func() { credRecheck.Store(oldRecheck) })
	e := newTenv(t)
	e.srv.events.Page = 1
	e.tenant("a")
	k := e.key("local", "a", "admin")
	sb := e.sandbox(k.Key, `{}`)
	const backlog = 3000
	for i := range backlog {
		if err := e.srv.m.Store().AppendEvent(t.Context(), &sandbox.Event{SandboxID: sb.ID, Type: "backlog",
			Time: time.Now(), Message: strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	st := e.openStream(k.Key, "/v1/events", "")
	e.must("local", "DELETE", "/v1/keys/"+k.ID, "", 200, nil)
	got := st.events(t, backlog+10, 20*time.Second)
	if len(got) >= backlog/2 {
		t.Fatalf("the revoked key's stream sent %d of the %d events behind it", len(got), backlog)
	}
	t.Logf("the revoked key's stream ended after %d frames of a %d-event backlog", len(got), backlog)
}

// TestEventStreamTenantCap: a tenant's keys together hold at most
// events.MaxStreamsPerTenant streams, however many keys its admins make; the
// host is not capped by tenant, and another tenant is not affected.
func TestEventStreamTenantCap(t *testing.T) {
	e := newTenv(t)
	e.tenant("a")
	e.tenant("b")
	var open []*sseStream
	for len(open) < events.MaxStreamsPerTenant {
		k := e.key("local", "a", "admin").Key
		for range min(events.MaxStreamsPerKey, events.MaxStreamsPerTenant-len(open)) {
			open = append(open, e.openStream(k, "/v1/events", ""))
		}
	}
	fresh := e.key("local", "a", "admin").Key
	if _, code, body := e.tryStream(fresh, "/v1/events", ""); code != 429 || !strings.Contains(body, "tenant a") {
		t.Fatalf("tenant a's stream over its cap: %d %s", code, body)
	}
	e.openStream(e.key("local", "b", "admin").Key, "/v1/events", "")
	e.openStream("local", "/v1/events", "")
	open[0].close()
	for deadline := time.Now().Add(5 * time.Second); ; {
		st, code, _ := e.tryStream(fresh, "/v1/events", "")
		if code == 200 {
			st.close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed stream's slot was not given back: %d", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
