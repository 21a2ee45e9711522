package main

import (
	"strings"
	"testing"

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
}
