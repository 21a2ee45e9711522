package migrations

import (
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
)

func TestEmbedded(t *testing.T) {
	ms, err := All()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || Latest() != len(ms) {
		t.Fatalf("Latest() = %d with %d migrations", Latest(), len(ms))
	}
}

// TestPortable keeps SQLite-only (and PostgreSQL-only) constructs out of the
// shared files; dialect differences go through macros.
func TestPortable(t *testing.T) {
	banned := regexp.MustCompile(`(?i)\b(AUTOINCREMENT|BLOB|BYTEA|SERIAL|BIGSERIAL|WITHOUT\s+ROWID|STRICT|DATETIME|STRFTIME|JSONB?|TIMESTAMPTZ|INTEGER|REAL|INSERT\s+OR|REPLACE\s+INTO)\b`)
	ms, err := All()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		for i, line := range strings.Split(m.SQL, "\n") {
			code, _, _ := strings.Cut(line, "--")
			if w := banned.FindString(code); w != "" {
				t.Errorf("%04d_%s.sql:%d: %q is not portable SQL", m.Version, m.Name, i+1, w)
			}
		}
	}
}

func TestParse(t *testing.T) {
	sql := &fstest.MapFile{Data: []byte("SELECT 1;")}
	for _, tc := range []struct {
		name    string
		files   fstest.MapFS
		want    []int
		wantErr string
	}{
		{"ordered", fstest.MapFS{"0002_b.sql": sql, "0001_a.sql": sql}, []int{1, 2}, ""},
		{"gap", fstest.MapFS{"0001_a.sql": sql, "0003_c.sql": sql}, nil, "out of sequence"},
		{"duplicate", fstest.MapFS{"0001_a.sql": sql, "0001_b.sql": sql}, nil, "out of sequence"},
		{"bad name", fstest.MapFS{"1_a.sql": sql}, nil, "bad file name"},
		{"empty", fstest.MapFS{}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, err := parse(tc.files)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) != len(tc.want) {
				t.Fatalf("got %d migrations, want %d", len(ms), len(tc.want))
			}
			for i, m := range ms {
				if m.Version != tc.want[i] {
					t.Errorf("ms[%d].Version = %d, want %d", i, m.Version, tc.want[i])
				}
			}
		})
	}
}
