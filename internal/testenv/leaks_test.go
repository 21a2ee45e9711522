package testenv

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestProcesses reads a fake /proc: the process group from stat (a comm
// with spaces and parens does not shift it), zombies skipped.
func TestProcesses(t *testing.T) {
	root := t.TempDir()
	old := procRoot
	procRoot = root
	t.Cleanup(func() { procRoot = old })
	write(t, root+"/100/stat", "100 (berth) S 1 100 100 0 -1")
	write(t, root+"/100/cmdline", "/tmp/berth-e2e-1/berth\x00serve\x00--data-dir\x00/tmp/berth-e2e-1/data\x00")
	write(t, root+"/101/stat", "101 (run c) (x)) S 100 100 100 0 -1")
	write(t, root+"/101/cmdline", "runc\x00--root=/tmp/berth-e2e-1/data/runc\x00")
	write(t, root+"/102/stat", "102 (gone) Z 100 100 100 0 -1")
	write(t, root+"/103/stat", "103 (other) S 1 103 103 0 -1")
	write(t, root+"/103/cmdline", "/tmp/berth-e2e-10/berth\x00serve\x00")
	write(t, root+"/self/stat", "not a pid")

	if got := groupMembers(100); !slices.Equal(got, []string{"100 (berth)", "101 (run c) (x))"}) {
		t.Errorf("groupMembers(100) = %v", got)
	}
	var naming []int
	for _, p := range processes() {
		if names(p.cmdline, "/tmp/berth-e2e-1/data") {
			naming = append(naming, p.pid)
		}
	}
	if !slices.Equal(naming, []int{100, 101}) {
		t.Errorf("processes naming the data dir: %v", naming)
	}
	// Sweep: harness binaries running serve or agent, by their path.
	var procs []string
	for _, l := range Sweep(SweepOptions{TempRoot: "/tmp", Since: time.Now().Add(time.Hour)}) {
		if l.Kind == "process" {
			procs = append(procs, l.What)
		}
	}
	if len(procs) != 2 {
		t.Errorf("sweep found processes %v, want 100 and 103", procs)
	}
}

func TestLoopDevices(t *testing.T) {
	root := t.TempDir()
	old := sysBlock
	sysBlock = root
	t.Cleanup(func() { sysBlock = old })
	write(t, root+"/loop3/loop/backing_file", "/tmp/berth-e2e-1/data/pool/volumes/v.img (deleted)\n")
	write(t, root+"/loop4/loop/backing_file", "/var/lib/other.img\n")
	got := loopDevices()
	if len(got) != 2 || got["/dev/loop3"] != "/tmp/berth-e2e-1/data/pool/volumes/v.img" {
		t.Errorf("loopDevices = %v", got)
	}
}

func TestUnder(t *testing.T) {
	for _, tc := range []struct {
		path, dir string
		want      bool
	}{
		{"/tmp/a/data", "/tmp/a/data", true},
		{"/tmp/a/data/x", "/tmp/a/data", true},
		{"/tmp/a/data/x", "/tmp/a/data/", true},
		{"/tmp/a/database", "/tmp/a/data", false},
		{"/tmp/a", "/tmp/a/data", false},
	} {
		if got := under(tc.path, tc.dir); got != tc.want {
			t.Errorf("under(%q, %q) = %v", tc.path, tc.dir, got)
		}
	}
	if !names([]byte("runsc\x00--root=/d/runsc\x00"), "/d") || names([]byte("x\x00/dd\x00"), "/d") {
		t.Error("names")
	}
}

// TestSweepDirs: only harness dirs newer than the stamp count, never the
// suite's binary dir.
func TestSweepDirs(t *testing.T) {
	root := t.TempDir()
	oldCNI, oldLogs := cniResults, containerLogs
	cniResults, containerLogs = t.TempDir(), t.TempDir()
	t.Cleanup(func() { cniResults, containerLogs = oldCNI, oldLogs })
	write(t, cniResults+"/berth-k8s-1a2b3c-c0ffee-eth0", "{}")
	for _, d := range []string{"berth-e2e-1", "berth-bench-2", "berth-e2e-bin-3", "berth-pg-test", "other"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, l := range Sweep(SweepOptions{TempRoot: root}) {
		if l.Kind == "file" {
			got = append(got, filepath.Base(l.What))
		}
	}
	if !slices.Equal(got, []string{"berth-k8s-1a2b3c-c0ffee-eth0", "berth-bench-2", "berth-e2e-1"}) {
		t.Errorf("sweep dirs = %v", got)
	}
	for _, l := range Sweep(SweepOptions{TempRoot: root, Since: time.Now().Add(time.Hour)}) {
		if l.Kind == "file" {
			t.Errorf("older than the stamp but counted: %s", l)
		}
	}
}

func TestK8sLinkNames(t *testing.T) {
	for name, want := range map[string]bool{
		"bk1a2b3c": true, "bkn1a2b3c": true, "bk1a2b3": false, "bkx1a2b3c": false,
		"bk1a2b3c4": false, "berth0": false, "bkn1A2B3C": false,
	} {
		if got := k8sLink.MatchString(name); got != want {
			t.Errorf("%q: %v, want %v", name, got, want)
		}
	}
}
