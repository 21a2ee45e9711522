// Package cgroups reads and cleans up the cgroups berth's runtime creates
// for sandboxes, on cgroup v1 (one hierarchy per controller) and v2. All
// paths are relative to one parent (e.g. /berth-<instance>), so a daemon
// only ever sees and touches its own sandboxes' cgroups.
package cgroups

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Root is where cgroup hierarchies are mounted.
var Root = "/sys/fs/cgroup"

// V2 reports whether the host uses the unified hierarchy only.
func V2() bool {
	var st unix.Statfs_t
	if err := unix.Statfs(Root, &st); err != nil {
		return false
	}
	return st.Type == unix.CGROUP2_SUPER_MAGIC
}

// hierarchies returns the mounted hierarchy roots that runc creates
// cgroups in: every v1 controller directory (and the v2 one of a hybrid
// layout), or the single v2 root.
//
// The answer is kept per Root: the host's hierarchies do not change under
// a running daemon, and asking again (a directory read and a statfs per
// controller) was most of the cost of the reconciler's per-sandbox checks.
// A failed read is not kept.
func hierarchies() []string {
	known.mu.Lock()
	defer known.mu.Unlock()
	if known.root == Root && known.list != nil {
		return known.list
	}
	list := readHierarchies()
	if list != nil {
		known.root, known.list = Root, list
	}
	return list
}

var known struct {
	mu   sync.Mutex
	root string
	list []string
}

func readHierarchies() []string {
	if V2() {
		return []string{Root}
	}
	ents, err := os.ReadDir(Root)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		p := filepath.Join(Root, e.Name())
		if e.Type()&os.ModeSymlink != 0 || !e.IsDir() {
			continue
		}
		// In the hybrid layout runc also creates the sandbox's cgroup in
		// the v2 hierarchy mounted at "unified".
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil && (st.Type == unix.CGROUP_SUPER_MAGIC || st.Type == unix.CGROUP2_SUPER_MAGIC) {
			out = append(out, p)
		}
	}
	return out
}

// Paths returns the directories of cgroup path rel in every hierarchy,
// whether or not they exist.
func Paths(rel string) []string {
	var out []string
	for _, h := range hierarchies() {
		out = append(out, filepath.Join(h, rel))
	}
	return out
}

// Exists reports whether cgroup rel exists in any hierarchy.
func Exists(rel string) bool {
	for _, p := range Paths(rel) {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// Children lists the names of the child cgroups of parent, across every
// hierarchy, without duplicates.
func Children(parent string) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range Paths(parent) {
		ents, err := os.ReadDir(p)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.IsDir() && !seen[e.Name()] {
				seen[e.Name()] = true
				out = append(out, e.Name())
			}
		}
	}
	return out
}

// Empty reports whether cgroup rel holds no process (in no hierarchy): a
// running sandbox answers from its first hierarchy's list.
func Empty(rel string) bool {
	for _, p := range Paths(rel) {
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err == nil && len(bytes.TrimSpace(b)) > 0 {
			return false
		}
	}
	return true
}

// Procs returns the pids in cgroup rel.
func Procs(rel string) []int {
	seen := map[int]bool{}
	var out []int
	for _, p := range Paths(rel) {
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
	}
	return out
}

// OOMKills returns how many processes the kernel's OOM killer has killed in
// cgroup rel so far.
func OOMKills(rel string) (int64, error) {
	var file, key string
	if V2() {
		file, key = filepath.Join(Root, rel, "memory.events"), "oom_kill"
	} else {
		file, key = filepath.Join(Root, "memory", rel, "memory.oom_control"), "oom_kill"
	}
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, sc.Err()
}

// KillAll sends SIGKILL to every process in cgroup rel (thawing it first
// so the signal is delivered) and waits until none is left.
func KillAll(rel string) error {
	thaw(rel)
	deadline := time.Now().Add(5 * time.Second)
	delay := 500 * time.Microsecond
	for {
		pids := Procs(rel)
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: %d processes survive SIGKILL", rel, len(pids))
		}
		time.Sleep(delay)
		if delay < 10*time.Millisecond {
			delay *= 2
		}
	}
}

// Destroy kills every process in cgroup rel and removes its directories.
// It is idempotent.
func Destroy(rel string) error {
	if err := KillAll(rel); err != nil {
		return err
	}
	var errs []error
	for _, p := range Paths(rel) {
		if err := rmdirRetry(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func thaw(rel string) {
	if V2() {
		_ = os.WriteFile(filepath.Join(Root, rel, "cgroup.freeze"), []byte("0"), 0)
		return
	}
	_ = os.WriteFile(filepath.Join(Root, "freezer", rel, "freezer.state"), []byte("THAWED"), 0)
}

func rmdirRetry(p string) error {
	var err error
	for i := 0; i < 50; i++ {
		err = unix.Rmdir(p)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("rmdir %s: %w", p, err)
}

// Freeze stops every process in cgroup rel (the cgroup freezer: no CPU,
// memory kept) and waits until the kernel reports the cgroup frozen.
func Freeze(rel string) error {
	file, want := freezerFile(rel), "FROZEN"
	val := "FROZEN"
	if V2() {
		val, want = "1", "1"
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := os.WriteFile(file, []byte(val), 0); err != nil {
			return fmt.Errorf("freezing %s: %w", rel, err)
		}
		if st, err := freezeState(rel); err != nil {
			return err
		} else if st == want {
			return nil
		}
		if time.Now().After(deadline) {
			thaw(rel)
			return fmt.Errorf("freezing %s: still not frozen after 10s", rel)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// Thaw resumes the processes of cgroup rel.
func Thaw(rel string) error {
	val := "THAWED"
	if V2() {
		val = "0"
	}
	if err := os.WriteFile(freezerFile(rel), []byte(val), 0); err != nil {
		return fmt.Errorf("thawing %s: %w", rel, err)
	}
	return nil
}

// Frozen reports whether cgroup rel is frozen.
func Frozen(rel string) bool {
	st, err := freezeState(rel)
	return err == nil && (st == "FROZEN" || st == "1")
}

func freezerFile(rel string) string {
	if V2() {
		return filepath.Join(Root, rel, "cgroup.freeze")
	}
	return filepath.Join(Root, "freezer", rel, "freezer.state")
}

func freezeState(rel string) (string, error) {
	if V2() {
		b, err := os.ReadFile(filepath.Join(Root, rel, "cgroup.events"))
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "frozen "); ok {
				return strings.TrimSpace(v), nil
			}
		}
		return "0", nil
	}
	b, err := os.ReadFile(filepath.Join(Root, "freezer", rel, "freezer.state"))
	return strings.TrimSpace(string(b)), err
}

// MemoryUsage returns the memory cgroup rel holds now (page cache
// included, as the limit counts it).
func MemoryUsage(rel string) (int64, error) {
	file := filepath.Join(Root, rel, "memory.current")
	if !V2() {
		file = filepath.Join(Root, "memory", rel, "memory.usage_in_bytes")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// CPUUsage returns the CPU time consumed by cgroup rel so far.
func CPUUsage(rel string) (time.Duration, error) {
	if V2() {
		b, err := os.ReadFile(filepath.Join(Root, rel, "cpu.stat"))
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return time.Duration(us) * time.Microsecond, err
			}
		}
		return 0, fmt.Errorf("no usage_usec in cpu.stat of %s", rel)
	}
	b, err := os.ReadFile(filepath.Join(Root, "cpuacct", rel, "cpuacct.usage"))
	if err != nil {
		return 0, err
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return time.Duration(ns), err
}
