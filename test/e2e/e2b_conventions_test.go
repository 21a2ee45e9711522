package e2e

import (
	"slices"
	"strings"
	"testing"
)

// TestE2BConventions (#33) drives the door with the unmodified e2b SDK
// (test/e2b/conventions.mjs) through what E2B programs assume: commands
// naming no user run as "user" (uid 1000) in /home/user with that HOME;
// relative paths are under /home/user; writeFiles keeps each entry's
// directories; gzip uploads and downloads; removing a missing file succeeds; Sandbox.list pages one
// match at a time, newest first (or oldest with order asc), filtered by
// metadata, template and startedAfter in the query; connect never
// shortens a running sandbox's timeout; ports are public unless the
// create asked allowPublicTraffic: false; isRunning is false once paused
// or killed.
func TestE2BConventions(t *testing.T) {
	parallel(t)
	d, url, key := e2bDaemon(t)
	type answer struct {
		Status int
		Body   string
	}
	var got struct {
		OK               bool   `json:"ok"`
		Failure          string `json:"failure"`
		ID               string `json:"id"`
		Who, Root, Files []string
		ReadBack         string `json:"readBack"`
		GZ               []string
		RemoveMissing    string `json:"removeMissing"`
		Pages            [][]string
		Asc              []string
		Template         int
		OtherTemplate    int `json:"otherTemplate"`
		Future, Past     int
		ConnectKept      bool   `json:"connectKept"`
		PublicPort       answer `json:"publicPort"`
		PrivatePort      answer `json:"privatePort"`
		PrivatePortToken answer `json:"privatePortToken"`
		Running, Paused  bool
		Killed           bool
		Python           string
	}
	runE2BScript(t, "conventions.mjs", url, key, &got)
	t.Logf("the SDK saw: %+v", got)
	if !got.OK {
		t.Fatalf("the SDK script failed: %s", got.Failure)
	}
	if want := []string{"user", "1000", "/home/user", "/home/user"}; !slices.Equal(got.Who, want) {
		t.Errorf("a command naming no user: %q, want %q", got.Who, want)
	}
	if want := []string{"root", "/root"}; !slices.Equal(got.Root, want) {
		t.Errorf("a command as root: %q, want %q", got.Root, want)
	}
	if got.Python != "3" {
		t.Errorf("`python` in the base template: %q, want Python 3", got.Python)
	}
	if want := []string{"rel", "one", "two", "1000"}; !slices.Equal(got.Files, want) {
		t.Errorf("relative and nested writes read back in the sandbox: %q, want %q", got.Files, want)
	}
	if got.ReadBack != "one" {
		t.Errorf("files.read of a relative nested path: %q", got.ReadBack)
	}
	if !slices.Equal(got.GZ, []string{"zipped", "zipped"}) {
		t.Errorf("a gzip upload read back with and without gzip: %q", got.GZ)
	}
	if got.RemoveMissing != "ok" {
		t.Errorf("removing a missing file: %s", got.RemoveMissing)
	}
	// Three sandboxes of the tag, one per page, newest first; asc reverses.
	var flat []string
	for _, p := range got.Pages {
		if len(p) != 1 {
			t.Errorf("pages of limit 1: %q", got.Pages)
			break
		}
		flat = append(flat, p[0])
	}
	if len(flat) != 3 || flat[2] != got.ID {
		t.Errorf("pages %q: want 3 of one each, A (%s) last", got.Pages, got.ID)
	}
	rev := slices.Clone(flat)
	slices.Reverse(rev)
	if !slices.Equal(got.Asc, rev) {
		t.Errorf("order asc: %q, want %q", got.Asc, rev)
	}
	if got.Template != 3 || got.OtherTemplate != 0 || got.Future != 0 || got.Past != 3 {
		t.Errorf("filters: template base %d (want 3), template nope %d, started after an hour from now %d, after an hour ago %d (want 3)",
			got.Template, got.OtherTemplate, got.Future, got.Past)
	}
	if !got.ConnectKept {
		t.Error("connect with a 30 s timeout shortened a running sandbox's 600 s timeout")
	}
	if got.PublicPort.Status != 200 || !strings.Contains(got.PublicPort.Body, "Directory listing") {
		t.Errorf("a port of a default sandbox without a token: %+v", got.PublicPort)
	}
	if got.PrivatePort.Status != 403 {
		t.Errorf("a port of an allowPublicTraffic: false sandbox without a token: %+v", got.PrivatePort)
	}
	if got.PrivatePortToken.Status != 200 {
		t.Errorf("that port with its traffic token: %+v", got.PrivatePortToken)
	}
	if !got.Running || got.Paused || got.Killed {
		t.Errorf("isRunning: running %v, paused %v, killed %v; want true, false, false", got.Running, got.Paused, got.Killed)
	}
	if out, _, code := d.cli("ls"); code != 0 || strings.Contains(out, got.ID) {
		t.Errorf("berth ls after the script: %q (exit %d)", out, code)
	}
}
