package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

func TestSandboxFilters(t *testing.T) {
	sbs := []api.Sandbox{
		{ID: "a", Name: "web", State: "running", Template: "py", Labels: map[string]string{"team": "ml", "ci": "1"}},
		{ID: "b", State: "stopped", Template: "py", Labels: map[string]string{"team": "web"}},
		{ID: "c", State: "running", Template: "base"},
	}
	for _, tc := range []struct {
		filters []string
		want    string
	}{
		{nil, "abc"},
		{[]string{"label=team=ml"}, "a"},
		{[]string{"label=team"}, "ab"},
		{[]string{"state=running"}, "ac"},
		{[]string{"template=py,state=stopped"}, "b"},
		{[]string{"template=py", "label=ci=1"}, "a"},
		{[]string{"name=web"}, "a"},
	} {
		match, err := parseSandboxFilters(tc.filters)
		if err != nil {
			t.Fatalf("%v: %v", tc.filters, err)
		}
		got := ""
		for i := range sbs {
			if match(&sbs[i]) {
				got += sbs[i].ID
			}
		}
		if got != tc.want {
			t.Errorf("%v kept %q, want %q", tc.filters, got, tc.want)
		}
	}
	for _, bad := range []string{"label", "state=", "owner=x", "label=a,=b"} {
		if _, err := parseSandboxFilters([]string{bad}); err == nil {
			t.Errorf("--filter %q accepted", bad)
		}
	}
}

func TestOneLineKeepsSuggestions(t *testing.T) {
	for in, want := range map[string]string{
		"unknown command \"lss\" for \"berth\"\n\nDid you mean this?\n\tls\n":            "unknown command \"lss\" for \"berth\"; did you mean ls?",
		"unknown command \"sta\" for \"berth\"\n\nDid you mean this?\n\tstart\n\tstop\n": "unknown command \"sta\" for \"berth\"; did you mean start or stop?",
		"first\nsecond": "first",
		"plain":         "plain",
	} {
		if got := oneLine(in); got != want {
			t.Errorf("oneLine(%q) = %q, want %q", in, got, want)
		}
	}
	// Through the real command tree.
	var stderr strings.Builder
	if code := execute(t.Context(), newRootCmd(), []string{"lss"}, &stderr); code == 0 || !strings.HasPrefix(stderr.String(), "berth: unknown command \"lss\" for \"berth\"; did you mean ") ||
		!strings.Contains(stderr.String(), " ls") || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("berth lss: %d %q", code, stderr.String())
	}
}

// TestCompletion: the completion verb is listed, and sandbox verbs and
// --template complete from the daemon.
func TestCompletion(t *testing.T) {
	_, host := newFakeDaemon(t)
	if out, _, code := runCLI(t, host, "", "--help"); code != 0 || !strings.Contains(out, "completion") {
		t.Errorf("berth --help lists no completion verb: %s", out)
	}
	out, _, code := runCLI(t, host, "", "__complete", "inspect", "")
	if code != 0 || !strings.Contains(out, "sb1\t") || !strings.Contains(out, "dev\t") || !strings.Contains(out, "sb2\t") {
		t.Errorf("completing inspect: %d %q", code, out)
	}
	out, _, code = runCLI(t, host, "", "__complete", "stop", "sb1", "s")
	if code != 0 || !strings.Contains(out, "sb2") {
		t.Errorf("completing stop's second id: %d %q", code, out)
	}
	out, _, code = runCLI(t, host, "", "__complete", "create", "--template", "")
	if code != 0 || !strings.Contains(out, "base") {
		t.Errorf("completing --template: %d %q", code, out)
	}
	// Verbs whose Use line puts flags before the id, or brackets it.
	for _, verb := range [][]string{{"exec"}, {"rm"}, {"logs"}, {"kill"}, {"events"}, {"snapshot", "ls"}, {"lease"}, {"port-token"}} {
		out, _, code := runCLI(t, host, "", append(append([]string{"__complete"}, verb...), "d")...)
		if code != 0 || !strings.Contains(out, "dev\t") || strings.Contains(out, "sb1\t") {
			t.Errorf("completing %v: %d %q", verb, code, out)
		}
	}
	// berth fs takes ID:/path: the id comes with its colon and no space.
	out, _, _ = runCLI(t, host, "", "__complete", "fs", "ls", "sb")
	if !strings.Contains(out, "sb1:\t") || !strings.Contains(out, "sb2:\t") || !strings.Contains(out, ":6\n") {
		t.Errorf("completing fs ls: %q", out)
	}
	// Template verbs, several names for rm.
	out, _, _ = runCLI(t, host, "", "__complete", "template", "rm", "base", "")
	if !strings.Contains(out, "base\n") {
		t.Errorf("completing template rm's second name: %q", out)
	}
	// The flag's value completes after positional arguments too.
	out, _, _ = runCLI(t, host, "", "__complete", "run", "--template", "")
	if !strings.Contains(out, "base\n") {
		t.Errorf("completing run --template: %q", out)
	}
}

// TestCompletionFailsQuietly: a daemon that is down, refuses or does not
// answer completes nothing, with no error directive and nothing on the
// terminal but cobra's own directive line.
func TestCompletionFailsQuietly(t *testing.T) {
	isolateConfig(t)
	completionTimeout = 100 * time.Millisecond
	t.Cleanup(func() { completionTimeout = 2 * time.Second })
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(release) })
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, 401, api.ErrorBody{Error: api.Error{Code: "unauthorized", Message: "bad key"}})
	}))
	t.Cleanup(refuse.Close)
	for name, host := range map[string]string{
		"hanging": hang.URL, "refusing": refuse.URL, "down": "unix://" + t.TempDir() + "/none.sock", "bad host": "ftp://x",
	} {
		for _, args := range [][]string{{"inspect", ""}, {"fs", "ls", ""}, {"template", "inspect", ""}, {"run", "--template", ""}} {
			out, errs, code := runCLI(t, host, "", append([]string{"__complete"}, args...)...)
			if code != 0 || out != ":4\n" || strings.Contains(errs, "berth:") {
				t.Errorf("%s daemon, completing %v: %d %q %q", name, args, code, out, errs)
			}
		}
	}
}

// A followed event table keeps its columns aligned from row to row,
// whatever each value's length: every row is written alone, so widths
// are fixed, not measured.
func TestFollowedEventsAligned(t *testing.T) {
	evs := []api.Event{
		{ID: 7, Time: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC), SandboxID: "abcdefgh12345678", Type: "state", From: "creating", To: "running", Actor: "local", Cause: "user", Outcome: "ok"},
		{ID: 12345, Time: time.Date(2026, 12, 7, 12, 0, 1, 0, time.UTC), SandboxID: "zz", Type: "network", To: "quarantined", Actor: "lease:abcdefgh12345678", Cause: "reconciler", Outcome: "refused", Message: "m"},
	}
	for _, all := range []bool{false, true} {
		rows := []string{fixedRow(eventHeaderCells(all), all)}
		for _, e := range evs {
			rows = append(rows, fixedRow(eventCells(e, all), all))
		}
		// Each column starts at the same offset in every row: the offset
		// of the header's names.
		hdr := rows[0]
		for _, name := range eventHeaderCells(all)[1:] {
			at := strings.Index(hdr, "  "+name) + 2
			for _, r := range rows[1:] {
				if at > len(r) || r[at-2:at] != "  " || r[at] == ' ' {
					t.Fatalf("all=%v: column %s does not start at %d in %q (header %q)", all, name, at, r, hdr)
				}
			}
		}
	}
}
