package agentd

import (
	"strings"
	"testing"
)

func TestValidHostname(t *testing.T) {
	for name, want := range map[string]bool{
		"alpha": true, "sb-1a2b3c4d": true, "a.b-c": true, strings.Repeat("a", 64): true,
		"": false, strings.Repeat("a", 65): false, "a b": false, "a/b": false, "a\x00": false, "ä": false,
	} {
		if got := validHostname(name); got != want {
			t.Errorf("validHostname(%q) = %v, want %v", name, got, want)
		}
	}
	if SetHostnameMain([]string{"bad name"}) != 2 || SetHostnameMain(nil) != 2 {
		t.Error("SetHostnameMain accepted a bad name or no name")
	}
}
