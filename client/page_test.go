package client

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/berth-sh/berth/api"
)

// A paging server: five sandboxes, pages of limit (default 2), cursors
// are the index of the next item.
func pagingServer(t *testing.T, seen *[]string) *Client {
	all := []api.Sandbox{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d"}, {ID: "e"}}
	return newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		*seen = append(*seen, q.Encode())
		if q.Get("cursor") == "bad" {
			w.WriteHeader(400)
			json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": "invalid_argument", "message": "cursor"}})
			return
		}
		limit := 2
		if v := q.Get("limit"); v != "" {
			limit, _ = strconv.Atoi(v)
		}
		from, _ := strconv.Atoi(q.Get("cursor"))
		to := min(from+limit, len(all))
		if to < len(all) {
			w.Header().Set(api.NextCursorHeader, strconv.Itoa(to))
		}
		json.NewEncoder(w).Encode(all[from:to])
	}), "")
}

func TestListPagesThrough(t *testing.T) {
	var seen []string
	c := pagingServer(t, &seen)
	sbs, err := c.ListSandboxes(t.Context(), true)
	if err != nil || len(sbs) != 5 || sbs[4].ID != "e" {
		t.Fatalf("ListSandboxes = %v %v", sbs, err)
	}
	if len(seen) != 3 || seen[0] != "all=true" || seen[1] != "all=true&cursor=2" {
		t.Errorf("requests %q", seen)
	}

	seen = nil
	page, next, err := c.ListSandboxesPage(t.Context(), false, Page{Limit: 3})
	if err != nil || len(page) != 3 || next != "3" || seen[0] != "limit=3" {
		t.Fatalf("first page %v %q %v (%q)", page, next, err, seen)
	}
	page, next, err = c.ListSandboxesPage(t.Context(), false, Page{Limit: 3, Cursor: next})
	if err != nil || len(page) != 2 || next != "" {
		t.Fatalf("last page %v %q %v", page, next, err)
	}
	if _, _, err := c.ListSandboxesPage(t.Context(), false, Page{Cursor: "bad"}); err == nil {
		t.Fatal("a bad cursor is no error")
	}
}
