package kubeenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A machine without the built binaries gets a message naming the script
// that builds them, from either way of finding them.
func TestFindBinariesNamesTheScript(t *testing.T) {
	empty := t.TempDir()
	t.Setenv("BERTH_K8S_BIN", "")
	t.Setenv("BERTH_K8S_CACHE", empty)
	if _, err := FindBinaries(); err == nil || !strings.Contains(err.Error(), "scripts/k8s-tools.sh") {
		t.Fatalf("no CURRENT: %v", err)
	}
	if err := os.WriteFile(filepath.Join(empty, "CURRENT"), []byte(empty+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FindBinaries(); err == nil || !strings.Contains(err.Error(), "scripts/k8s-tools.sh") {
		t.Fatalf("CURRENT naming an empty dir: %v", err)
	}
	t.Setenv("BERTH_K8S_BIN", empty)
	if _, err := FindBinaries(); err == nil || !strings.Contains(err.Error(), filepath.Join(empty, "etcd")) {
		t.Fatalf("BERTH_K8S_BIN naming an empty dir: %v", err)
	}
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"busybox":                 "docker.io/library/busybox:latest",
		"busybox:1":               "docker.io/library/busybox:1",
		"me/app:2":                "docker.io/me/app:2",
		"berth.local/pause:test":  "berth.local/pause:test",
		"localhost/x":             "localhost/x:latest",
		"reg.example:5000/a/b":    "reg.example:5000/a/b:latest",
		"reg.example:5000/a/b:v1": "reg.example:5000/a/b:v1",
	} {
		if got := normalize(in); got != want {
			t.Errorf("normalize(%q) = %q, want %q", in, got, want)
		}
	}
}
