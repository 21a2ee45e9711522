package server

import (
	"net/http"
	"strconv"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

// A list's next page is announced in api.NextCursorHeader; a page without
// it is the last. The body stays the bare JSON array it always was, so
// callers that do not page keep working (up to the first page).

// pageOf reads a list request's limit (1 or more, default and cap
// store.MaxPage: a larger one is served as the cap) and cursor (the
// api.NextCursorHeader of the page before; one that is not is 400).
func pageOf(r *http.Request) (store.Page, error) {
	q := r.URL.Query()
	p := store.Page{Limit: store.MaxPage, Cursor: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return store.Page{}, errdefs.Invalid("limit must be a positive number of items (at most %d are served)", store.MaxPage)
		}
		p.Limit = min(n, store.MaxPage)
	}
	return p, nil
}

// setNext announces the next page, if there is one.
func setNext(w http.ResponseWriter, next string) {
	if next != "" {
		w.Header().Set(api.NextCursorHeader, next)
	}
}
