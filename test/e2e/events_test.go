package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// follower collects a StreamEvents follow of c in the background.
type follower struct {
	mu   sync.Mutex
	evs  []api.Event
	stop context.CancelFunc
	done chan error
}

func follow(c *client.Client, q client.EventsQuery) *follower {
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{stop: cancel, done: make(chan error, 1)}
	go func() {
		f.done <- c.StreamEvents(ctx, q, func(ev api.Event) error {
			f.mu.Lock()
			f.evs = append(f.evs, ev)
			f.mu.Unlock()
			return nil
		})
	}()
	return f
}

func (f *follower) ids() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int64
	for _, ev := range f.evs {
		out = append(out, ev.ID)
	}
	return out
}

// waitFor waits until f has seen event id.
func (f *follower) waitFor(t *testing.T, id int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if ids := f.ids(); len(ids) > 0 && ids[len(ids)-1] >= id {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the follower did not reach event %d: has %v", id, f.ids())
}

// testStreamUnderChurn: followers from the start, from an id in the
// middle and one cut and resumed by hand all see exactly the recorded
// events after their position, in order, while sandboxes are created and
// deleted concurrently from several goroutines.
func testStreamUnderChurn(t *testing.T, d *daemon) {
	ctx := context.Background()
	from0 := follow(d.c, client.EventsQuery{})
	defer from0.stop()
	cut := follow(d.c, client.EventsQuery{})
	var (
		wg      sync.WaitGroup
		errs    = make(chan error, 16)
		midOnce sync.Once
		mid     int64
		resumed *follower
	)
	for w := range 3 {
		wg.Go(func() {
			for i := range 3 {
				sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: fmt.Sprintf("churn-%d-%d", w, i)})
				if err != nil {
					errs <- err
					return
				}
				if w == 0 && i == 1 {
					midOnce.Do(func() {
						evs, err := d.c.ListAllEvents(ctx, client.EventsQuery{})
						if err != nil || len(evs) == 0 {
							errs <- fmt.Errorf("list at the middle: %d %v", len(evs), err)
							return
						}
						mid = evs[len(evs)-1].ID
						resumed = follow(d.c, client.EventsQuery{After: mid})
						cut.stop() // cut it; it resumes below from its last id
					})
				}
				if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := <-cut.done; err != nil {
		t.Fatalf("cut follower: %v", err)
	}
	cutIDs := cut.ids()
	var last int64
	if len(cutIDs) > 0 {
		last = cutIDs[len(cutIDs)-1]
	}
	again := follow(d.c, client.EventsQuery{After: last})
	defer again.stop()
	defer resumed.stop()

	all, err := d.c.ListAllEvents(ctx, client.EventsQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var want []int64
	for _, ev := range all {
		want = append(want, ev.ID)
	}
	end := want[len(want)-1]
	for _, f := range []*follower{from0, resumed, again} {
		f.waitFor(t, end)
	}
	after := func(id int64) []int64 {
		var out []int64
		for _, w := range want {
			if w > id {
				out = append(out, w)
			}
		}
		return out
	}
	check := func(name string, got, want []int64) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: got %d events %v\nwant %d %v", name, len(got), got, len(want), want)
		}
	}
	check("from the start", from0.ids(), want)
	check(fmt.Sprintf("resumed after %d", mid), resumed.ids(), after(mid))
	check("cut, then resumed", append(cutIDs, again.ids()...), want)
	if len(want) < 9*4 {
		t.Errorf("only %d events for 9 create/delete cycles", len(want))
	}
}

// TestEventStreamResume: on SQLite.
func TestEventStreamResume(t *testing.T) {
	parallel(t)
	testStreamUnderChurn(t, startDaemon(t))
}

// TestEventStreamResumePostgres: on the real PostgreSQL, where ids are
// drawn at insert and committed later.
func TestEventStreamResumePostgres(t *testing.T) {
	parallel(t)
	testStreamUnderChurn(t, startDaemonWith(t, "--store", pgURL(t)))
}

// TestEventStreamAttacks: what the event stream must refuse or keep
// apart. Tenant a's stream never carries tenant b's events, and naming
// b's sandbox is 404; a lease reads only its own sandbox's stream, never
// /v1/events or another's; no credential and a forged lease are 401; a
// bad position is 400; a revoked key's open stream ends.
func TestEventStreamAttacks(t *testing.T) {
	parallel(t)
	_, addr, admin := tcpDaemon(t)
	ctx := context.Background()
	base := "http://" + addr
	keyOf := func(tenant string) (*client.Client, *api.CreatedAPIKey) {
		t.Helper()
		if _, err := admin.CreateTenant(ctx, tenant); err != nil {
			t.Fatal(err)
		}
		k, err := admin.CreateAPIKey(ctx, api.CreateAPIKeyRequest{Tenant: tenant, Role: "admin"})
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New(base, k.Key)
		if err != nil {
			t.Fatal(err)
		}
		return c, k
	}
	ca, ka := keyOf("a")
	cb, _ := keyOf("b")
	sa, err := ca.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer ca.DeleteSandbox(ctx, sa.ID, true)
	fa := follow(ca, client.EventsQuery{})
	defer fa.stop()
	sb, err := cb.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer cb.DeleteSandbox(ctx, sb.ID, true)
	if _, err := cb.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	// a's own later event, so a's follower has read past b's.
	if _, err := ca.Exec(ctx, sa.ID, api.ExecRequest{Cmd: []string{"true"}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	evsA, err := ca.ListAllEvents(ctx, client.EventsQuery{})
	if err != nil {
		t.Fatal(err)
	}
	fa.waitFor(t, evsA[len(evsA)-1].ID)
	fa.mu.Lock()
	for _, ev := range fa.evs {
		if ev.SandboxID != sa.ID {
			t.Errorf("tenant a's stream carried %+v", ev)
		}
	}
	fa.mu.Unlock()

	stream := func(path, token, lastID string) rawResponse {
		t.Helper()
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		req := "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nAccept: text/event-stream\r\nConnection: close\r\n"
		if token != "" {
			req += "Authorization: Bearer " + token + "\r\n"
		}
		if lastID != "" {
			req += "Last-Event-ID: " + lastID + "\r\n"
		}
		fmt.Fprint(c, req+"\r\n")
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var status int
		fmt.Sscanf(line, "HTTP/1.1 %d", &status)
		return rawResponse{status: status, body: line}
	}
	forged := "berth_lease_" + sb.ID + "_" + strings.Repeat("0", 40)
	for _, tc := range []struct {
		name, path, token, last string
		want                    []int
	}{
		{"a names b's sandbox", "/v1/events?sandbox=" + sb.ID, ka.Key, "", []int{404}},
		{"a opens b's sandbox stream", "/v1/sandboxes/" + sb.ID + "/events", ka.Key, "", []int{404}},
		{"a's lease on /v1/events", "/v1/events", sa.LeaseToken, "", []int{403}},
		{"a's lease on b's stream", "/v1/sandboxes/" + sb.ID + "/events", sa.LeaseToken, "", []int{403}},
		{"no credential", "/v1/events", "", "", []int{401}},
		{"forged lease", "/v1/sandboxes/" + sb.ID + "/events", forged, "", []int{401}},
		{"Last-Event-ID not an id", "/v1/events", ka.Key, "1; DROP TABLE events", []int{400}},
		{"oversized filter", "/v1/events?type=" + strings.Repeat("x", 200), ka.Key, "", []int{400}},
		{"a's lease on its own stream", "/v1/sandboxes/" + sa.ID + "/events", sa.LeaseToken, "", []int{200}},
	} {
		if got := stream(tc.path, tc.token, tc.last); !containsInt(tc.want, got.status) {
			t.Errorf("%s: %d (%s), want %v", tc.name, got.status, strings.TrimSpace(got.body), tc.want)
		}
	}
	// A revoked key's open stream ends (re-checked every 5 s).
	fa.stop()
	<-fa.done
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ended := make(chan error, 1)
	go func() { ended <- ca.StreamEvents(cctx, client.EventsQuery{}, func(api.Event) error { return nil }) }()
	time.Sleep(500 * time.Millisecond)
	if _, err := admin.RevokeAPIKey(ctx, ka.Prefix); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if !client.IsUnauthorized(err) {
			t.Fatalf("a revoked key's stream ended with %v, want unauthenticated on reconnect", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a revoked key's stream did not end")
	}
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestEventStreamStalledClient: a stream whose client reads nothing does
// not hold creates up.
func TestEventStreamStalledClient(t *testing.T) {
	d, addr, admin := tcpDaemon(t)
	ctx := context.Background()
	raw, err := os.ReadFile(d.dataDir + "/admin.key")
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(raw))
	for range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.(*net.TCPConn).SetReadBuffer(1024)
		fmt.Fprintf(c, "GET /v1/events HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\nAuthorization: Bearer %s\r\n\r\n", addr, key)
	}
	start := time.Now()
	for i := range 6 {
		sb, err := admin.CreateSandbox(ctx, api.CreateSandboxRequest{Name: fmt.Sprintf("stall-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.DeleteSandbox(ctx, sb.ID, true); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > 60*time.Second {
		t.Fatalf("6 create/delete cycles with stalled streams open took %v", d)
	}
}

// TestEventsFollowCLI: `berth events --follow` prints a sandbox created
// after it started, and goes on after the daemon restarts.
func TestEventsFollowCLI(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, berthBin, "events", "--follow", "--type", "state")
	cmd.Env = append(cmd.Environ(), "BERTH_HOST=unix://"+d.socket)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitLine := func(substr string) string {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("berth events --follow ended before a line with %q", substr)
				}
				if strings.Contains(l, substr) {
					return l
				}
			case <-timeout:
				t.Fatalf("no line with %q from berth events --follow", substr)
			}
		}
	}
	if h := waitLine("SANDBOX"); !strings.HasPrefix(h, "ID") {
		t.Fatalf("header %q", h)
	}
	sb, err := d.c.CreateSandbox(context.Background(), api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if l := waitLine(sb.ID); !strings.Contains(l, "state") {
		t.Fatalf("line %q", l)
	}
	d.stop()
	d.start()
	sb2, err := d.c.CreateSandbox(context.Background(), api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	waitLine(sb2.ID)
}
