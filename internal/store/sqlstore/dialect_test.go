package sqlstore

import "testing"

func TestDollarPlaceholders(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"SELECT 1", "SELECT 1"},
		{"a = ? AND b IN (?, ?)", "a = $1 AND b IN ($2, $3)"},
		{"x = '?' AND y = ?", "x = '?' AND y = $1"},
		{`"we?ird" = ? -- why?` + "\nAND z = ?", `"we?ird" = $1 -- why?` + "\nAND z = $2"},
		{"x = 'it''s?' AND y = ?", "x = 'it''s?' AND y = $1"},
		{"x = 'open ?", "x = 'open ?"},
		{"? -- trailing ?", "$1 -- trailing ?"},
	} {
		if got := DollarPlaceholders(tc.in); got != tc.want {
			t.Errorf("DollarPlaceholders(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
