package sqlstore

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/berth-sh/berth/internal/errdefs"
)

func TestCursorRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		list string
		at   int64
		id   string
	}{
		{"sandboxes", 1741946966535897, "8f3a9c"},
		{"sandboxes", 0, ""},
		{"sandboxes", -5, "pre-1970"},
		{"templates", 0, "ghcr.io/x|y:latest"}, // the id may hold the separator
		{"events", 1 << 62, ""},
	} {
		c := EncodeCursor(tc.list, tc.at, tc.id)
		at, id, err := DecodeCursor(tc.list, c)
		if err != nil || at != tc.at || id != tc.id {
			t.Errorf("%+v: decoded %d %q %v", tc, at, id, err)
		}
		if _, _, err := DecodeCursor("volumes", c); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%+v: another list's cursor: %v", tc, err)
		}
	}
}

// FuzzDecodeCursor: a cursor comes from the caller. Whatever it is, decoding
// does not panic and answers ErrInvalid or a position whose encoding is the
// input (one encoding per position) and whose id a database accepts.
func FuzzDecodeCursor(f *testing.F) {
	f.Add("sandboxes", EncodeCursor("sandboxes", 1741946966535897, "abc"))
	f.Add("events", EncodeCursor("events", 42, ""))
	f.Add("templates", EncodeCursor("templates", 0, "base"))
	f.Add("sandboxes", "c2FuZGJveGVzfDAxfHg")
	f.Add("sandboxes", "c2FuZGJveGVzfDE3NDE5NDY5NjY1MzU4OTd8cDUA")
	f.Add("sandboxes", "")
	f.Add("sandboxes", strings.Repeat("A", 1000))
	f.Fuzz(func(t *testing.T, list, c string) {
		at, id, err := DecodeCursor(list, c)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("DecodeCursor(%q, %q): %v is not ErrInvalid", list, c, err)
			}
			return
		}
		if got := EncodeCursor(list, at, id); got != c {
			t.Fatalf("DecodeCursor(%q, %q) = %d %q, which encodes as %q", list, c, at, id, got)
		}
		if len(c) > maxCursor || !utf8.ValidString(id) || strings.ContainsFunc(id, unicode.IsControl) {
			t.Fatalf("DecodeCursor(%q, %q) accepted id %q", list, c, id)
		}
	})
}
