package events

import (
	"net/url"
	"testing"
)

// FuzzParseEventQuery: whatever the query and Last-Event-ID, the parser
// returns an error or filters within bounds, made of characters ids and
// types have.
func FuzzParseEventQuery(f *testing.F) {
	f.Add("sandbox=a&type=state&after=3", "7")
	f.Add("after=-1", "")
	f.Add("type=a%0Ab&type=a", " 12 ")
	f.Fuzz(func(t *testing.T, rawQuery, last string) {
		q, err := url.ParseQuery(rawQuery)
		if err != nil {
			return
		}
		eq, err := parseEventQuery(q, last)
		if err != nil {
			return
		}
		if eq.After < 0 || len(eq.Sandboxes) > MaxEventFilters || len(eq.Types) > MaxEventFilters {
			t.Fatalf("%+v out of bounds", eq)
		}
		for _, v := range append(eq.Sandboxes, eq.Types...) {
			if checkFilterValue("x", v) != nil {
				t.Fatalf("accepted %q", v)
			}
		}
	})
}
