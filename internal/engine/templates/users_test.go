package templates

import (
	"strconv"
	"strings"
	"testing"
)

func TestPasswdHas(t *testing.T) {
	passwd := []byte("root:x:0:0:root:/root:/bin/sh\ndev:x:1000:1000::/home/dev:/bin/sh\n")
	if line, ok := passwdHas(passwd, "dev", 2000); !ok || !strings.HasPrefix(line, "dev:") {
		t.Errorf("name dev: %q %v", line, ok)
	}
	if line, ok := passwdHas(passwd, "other", 1000); !ok || !strings.HasPrefix(line, "dev:") {
		t.Errorf("uid 1000: %q %v", line, ok)
	}
	if _, ok := passwdHas(passwd, "other", 1001); ok {
		t.Error("other/1001 found")
	}
	if !groupHas([]byte("root:x:0:\ntools:x:2000:dev\n"), 2000) || groupHas([]byte("tools:x:2000"), 2001) {
		t.Error("groupHas")
	}
}

// FuzzPasswdHas: whatever a sandbox wrote to its passwd, the check ends,
// and a line it reports is one of the file's naming the user or uid.
func FuzzPasswdHas(f *testing.F) {
	f.Add([]byte("root:x:0:0:root:/root:/bin/sh\n"), "dev", 1000)
	f.Add([]byte("dev:x:1000\n::::\n\x00:\xff:1000"), "dev", 1000)
	f.Add([]byte(strings.Repeat(":", 1000)), "", 0)
	f.Fuzz(func(t *testing.T, passwd []byte, name string, uid int) {
		line, ok := passwdHas(passwd, name, uid)
		if !ok {
			return
		}
		if !strings.Contains(string(passwd), line) {
			t.Fatalf("reported %q, not a line of the file", line)
		}
		fs := strings.Split(line, ":")
		if len(fs) < 3 || (fs[0] != name && fs[2] != strconv.Itoa(uid)) {
			t.Fatalf("reported %q for %s/%d", line, name, uid)
		}
		_ = groupHas(passwd, uid)
	})
}
