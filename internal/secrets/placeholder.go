package secrets

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// PlaceholderPrefix starts every placeholder, so one is recognisable in a
// request, a log or a bug report.
const PlaceholderPrefix = "berth-secret-placeholder-"

// NewPlaceholder returns a fresh placeholder: the prefix and 32 random
// hex digits (128 bits: not guessable, so a sandbox cannot name another
// sandbox's placeholder).
func NewPlaceholder() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("secrets: no randomness: " + err.Error()) // crypto/rand does not fail on Linux
	}
	return PlaceholderPrefix + hex.EncodeToString(b[:])
}

// IsPlaceholder reports whether s has a placeholder's form.
func IsPlaceholder(s string) bool {
	h, ok := strings.CutPrefix(s, PlaceholderPrefix)
	if !ok || len(h) != 32 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if !(h[i] >= '0' && h[i] <= '9' || h[i] >= 'a' && h[i] <= 'f') {
			return false
		}
	}
	return true
}

// HeaderSafe reports whether v may be put into an HTTP header value: no
// CR, LF, NUL or other control byte but tab, so a substituted secret
// cannot add a header or end the request head.
func HeaderSafe(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// Substitute replaces, in one pass over s, every placeholder that is a key
// of values by its value. Values are inserted as they are and not scanned
// again, so a value that looks like a placeholder is not expanded. A key
// that is not a placeholder is ignored.
func Substitute(s string, values map[string]string) string {
	if len(values) == 0 || !strings.Contains(s, PlaceholderPrefix) {
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(s, PlaceholderPrefix)
		if i < 0 {
			break
		}
		end := i + len(PlaceholderPrefix) + 32
		if end <= len(s) {
			if v, ok := values[s[i:end]]; ok && IsPlaceholder(s[i:end]) {
				b.WriteString(s[:i])
				b.WriteString(v)
				s = s[end:]
				continue
			}
		}
		b.WriteString(s[:i+len(PlaceholderPrefix)])
		s = s[i+len(PlaceholderPrefix):]
	}
	b.WriteString(s)
	return b.String()
}
