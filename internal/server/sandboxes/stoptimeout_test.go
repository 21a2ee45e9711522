package sandboxes

import (
	"errors"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// TestParseStopTimeout: stop's ?timeout= takes a duration or whole
// seconds within 0..10m; anything else is 400 invalid_argument.
func TestParseStopTimeout(t *testing.T) {
	for in, want := range map[string]time.Duration{"0": 0, "30": 30 * time.Second, "1500ms": 1500 * time.Millisecond, "10m": 10 * time.Minute} {
		got, err := parseStopTimeout(in)
		if err != nil || got != want {
			t.Errorf("%q = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "-1s", "11m", "601", "soon", "1e9", "99999999999999999999"} {
		if _, err := parseStopTimeout(in); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%q: err %v, want invalid", in, err)
		}
	}
}

// FuzzParseStopTimeout: any query value either parses within 0..10m or is
// refused as invalid; it never panics.
func FuzzParseStopTimeout(f *testing.F) {
	for _, s := range []string{"0", "10", "1.5s", "10m", "-1", "601", "1e3", "9223372036854775807", "1h", "", " 5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, err := parseStopTimeout(v)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("%q: error %v is not invalid_argument", v, err)
			}
			return
		}
		if d < 0 || d > 10*time.Minute {
			t.Fatalf("%q parsed to %s, outside 0..10m", v, d)
		}
	})
}
