package e2e

import (
	"context"
	"errors"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// TestListPaging: list routes answer pages with the next cursor in
// Berth-Next-Cursor, the SDK's List still returns everything, and a bad
// limit or cursor is 400 invalid_argument, not a 500.
func TestListPaging(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	var want []string
	for range 3 {
		sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Persistent: true})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, sb.ID)
	}
	first, next, err := d.c.ListSandboxesPage(ctx, false, client.Page{Limit: 2})
	if err != nil || len(first) != 2 || next == "" {
		t.Fatalf("first page: %d sandboxes, next %q, %v", len(first), next, err)
	}
	rest, last, err := d.c.ListSandboxesPage(ctx, false, client.Page{Limit: 2, Cursor: next})
	if err != nil || len(rest) != 1 || last != "" {
		t.Fatalf("second page: %d sandboxes, next %q, %v", len(rest), last, err)
	}
	got := []string{first[0].ID, first[1].ID, rest[0].ID}
	all, err := d.c.ListSandboxes(ctx, false)
	if err != nil || len(all) != 3 {
		t.Fatalf("ListSandboxes: %d %v", len(all), err)
	}
	for i := range got {
		if got[i] != want[i] || all[i].ID != want[i] {
			t.Fatalf("order: pages %v, list %v, want creation order %v", got, all, want)
		}
	}
	evs, enext, err := d.c.EventsPage(ctx, want[0], 0, client.Page{Limit: 1})
	if err != nil || len(evs) != 1 || enext == "" {
		t.Fatalf("events page: %v %q %v", evs, enext, err)
	}
	for _, bad := range []client.Page{{Limit: 1, Cursor: "not-a-cursor"}, {Limit: 1, Cursor: enext}} {
		_, _, err := d.c.ListSandboxesPage(ctx, false, bad)
		var ae *client.Error
		if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "invalid_argument" {
			t.Errorf("cursor %q: %v, want 400 invalid_argument", bad.Cursor, err)
		}
	}
	if _, _, err := d.c.ListSandboxesPage(ctx, false, client.Page{Limit: -1}); err != nil {
		t.Errorf("a non-positive SDK limit is the server's default: %v", err)
	}
	for _, id := range want {
		if _, err := d.c.DeleteSandbox(ctx, id, true); err != nil {
			t.Error(err)
		}
	}
}
