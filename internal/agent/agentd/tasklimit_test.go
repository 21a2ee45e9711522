package agentd

import (
	"os"
	"path/filepath"
	"testing"
)

func TestOwnCgroup(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ in, want string }{
		{"0::/abc123\n", "/abc123"},
		{"3:cpu:/x\n0::/\n", "/"},
		{"0::/a/../../b\n", ""},
		{"7:pids:/x\n", ""},
	} {
		f := filepath.Join(dir, "cgroup")
		if err := os.WriteFile(f, []byte(c.in), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ownCgroup(f)
		if got != c.want || (err != nil) != (c.want == "") {
			t.Errorf("ownCgroup(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestLimitTasksMainRefusesBadLimits(t *testing.T) {
	for _, args := range [][]string{nil, {"0"}, {"-1"}, {"x"}, {"4194305"}, {"1", "2"}} {
		if code := LimitTasksMain(args); code != 2 {
			t.Errorf("LimitTasksMain(%q) = %d, want 2", args, code)
		}
	}
}
