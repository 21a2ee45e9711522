package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/cgroups"
	"github.com/berth-sh/berth/internal/network"
	"github.com/berth-sh/berth/internal/node/local"
	"github.com/berth-sh/berth/internal/overlay"
)

// This file is the one definition of "a leak": what a daemon (and a
// harness around it) may not leave on the host once its sandboxes are
// deleted. e2e, soak, bench, selftest and scripts/leakcheck.sh all ask it.

// Scope is one daemon's share of the host.
type Scope struct {
	// DataDir is the daemon's data dir: mounts, loop devices, files and
	// processes are looked for under and naming it.
	DataDir string
	// Instance names its cgroup parent and network objects; default
	// derived from DataDir, as the daemon derives it.
	Instance string
	// Netns is the network namespace (a name under /var/run/netns) its
	// network lives in; "" = this process's.
	Netns string
	// PGID is its process group (the daemon's pid); 0 = not checked.
	PGID int
	// Running: the daemon is still up (sandboxes deleted). Its own mounts
	// (the storage pool, the share, runsc's null netns), the pool's loop
	// device, its bridge and nft tables and its process group are then
	// not leaks; per-sandbox objects still are.
	Running bool
	// Cgroups are more cgroup parents made for it ("/berth-1a2b-peer",
	// the bench's raw runc peer): no child may be left in them either.
	Cgroups []string
	// Namespaces are network namespaces the harness made for it: they
	// must be gone.
	Namespaces []string
}

// Leak is one thing left behind.
type Leak struct {
	Kind string // mount, loop, cgroup, network, netns, process, file
	What string
}

func (l Leak) String() string { return l.Kind + " " + l.What }

func (s Scope) instance() string {
	if s.Instance != "" {
		return s.Instance
	}
	return local.InstanceName(s.DataDir)
}

// CgroupParents are the cgroup parents of s: the instance's and Cgroups.
func (s Scope) CgroupParents() []string {
	return append([]string{"/" + s.instance()}, s.Cgroups...)
}

// ownMounts are the daemon's own mounts while it runs.
func (s Scope) ownMounts() []string {
	return []string{filepath.Join(s.DataDir, "pool"), filepath.Join(s.DataDir, "share"), filepath.Join(s.DataDir, "runsc", "null-netns")}
}

// Check lists what of s is left on the host. It changes nothing.
func Check(s Scope) []Leak {
	var out []Leak
	add := func(kind, format string, args ...any) { out = append(out, Leak{kind, fmt.Sprintf(format, args...)}) }

	// Mounts under the data dir; the data dir itself may be a test's own
	// filesystem (a small one, to fill).
	ms, err := overlay.MountsUnder(s.DataDir)
	if err != nil {
		add("mount", "reading mountinfo: %v", err)
	}
	for _, m := range ms {
		if m != s.DataDir && !(s.Running && slices.Contains(s.ownMounts(), m)) {
			add("mount", "%s", m)
		}
	}
	// Loop devices backed by files under the data dir: volumes and capped
	// root layers are autoclear, so one left means a mount left, or a
	// device attached and never mounted.
	for dev, file := range loopDevices() {
		if under(file, s.DataDir) && !(s.Running && file == filepath.Join(s.DataDir, "pool.img")) {
			add("loop", "%s on %s", dev, file)
		}
	}
	// Cgroups: no sandbox cgroup under the instance's parent (or another
	// parent made for it), in any hierarchy, and no process in a parent.
	for _, parent := range s.CgroupParents() {
		for _, dir := range CgroupDirs(parent) {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if e.IsDir() {
					add("cgroup", "%s", filepath.Join(dir, e.Name()))
				}
			}
		}
		if procs := cgroups.Procs(parent); len(procs) > 0 {
			add("cgroup", "%s holds processes %v", parent, procs)
		}
	}
	// Network objects of the instance in its namespace (a namespace the
	// harness made and already deleted took them with it).
	nsPath := ""
	if s.Netns != "" {
		nsPath = NetnsPath(s.Netns)
	}
	if _, err := os.Stat(nsPath); nsPath == "" || err == nil {
		objs, err := network.Objects(s.instance(), nsPath)
		switch {
		case err != nil:
			add("network", "listing %s's objects: %v", s.instance(), err)
		default:
			for _, v := range objs.Veths {
				add("network", "veth %s", v)
			}
			if !s.Running {
				if objs.Bridge != "" {
					add("network", "bridge %s", objs.Bridge)
				}
				for _, t := range objs.Tables {
					add("network", "nft table %s", t)
				}
			}
		}
	}
	for _, ns := range s.Namespaces {
		if _, err := os.Stat(NetnsPath(ns)); err == nil {
			add("netns", "%s", ns)
		}
	}
	// Processes: the daemon's group once it stopped, and anything naming
	// the data dir (a runsc sandbox, a runc left mid-operation) that is
	// not the running daemon's.
	for _, p := range processes() {
		inGroup := s.PGID > 0 && p.pgid == s.PGID
		switch {
		case inGroup && !s.Running:
			add("process", "%d (%s) in the daemon's process group", p.pid, p.comm)
		case !inGroup && names(p.cmdline, s.DataDir):
			add("process", "%d (%s) names the data dir", p.pid, p.comm)
		}
	}
	// Files: sandbox directories and runtime state.
	for _, sub := range []string{"sandboxes", "runc"} {
		ents, _ := os.ReadDir(filepath.Join(s.DataDir, sub))
		for _, e := range ents {
			add("file", "%s", filepath.Join(s.DataDir, sub, e.Name()))
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(s.DataDir, "runsc")); len(ents) > 0 {
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".state") {
				add("file", "%s", filepath.Join(s.DataDir, "runsc", e.Name()))
			}
		}
	}
	return out
}

// Clean removes what a stopped daemon of s left (processes of its group,
// naming its data dir or in its cgroups; mounts under its data dir; loop
// devices backed there; cgroups under its parents) and the parents
// themselves, which the daemon keeps for its next start; it reports the
// leaks Check found first and what it could not remove. The data dir
// itself is the caller's. It is also the harness's way out when a daemon
// cannot be started again to delete its own sandboxes: the processes go
// first, so that no mount is busy when it is unmounted (a busy one would
// only be detached lazily, and a lazily detached filesystem over a loop
// device can stay pinned where nothing in user space can release it).
func Clean(s Scope) ([]Leak, error) {
	s.Running = false
	leaks := Check(s)
	var errs []error
	if err := killLeft(s); err != nil {
		errs = append(errs, err)
	}
	ms, _ := overlay.MountsUnder(s.DataDir)
	slices.Reverse(ms) // deepest first
	for _, m := range ms {
		if m == s.DataDir {
			continue
		}
		if err := overlay.Unmount(m); err != nil {
			errs = append(errs, err)
		}
	}
	// Volumes and capped root layers are autoclear loop devices, gone with
	// their mounts; one still attached was never mounted (or its mount was
	// not ours to find).
	for dev, file := range loopDevices() {
		if under(file, s.DataDir) {
			if err := detachLoop(dev); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, parent := range s.CgroupParents() {
		for _, child := range cgroups.Children(parent) {
			if err := cgroups.Destroy(parent + "/" + child); err != nil {
				errs = append(errs, err)
			}
		}
		if err := cgroups.Destroy(parent); err != nil {
			errs = append(errs, err)
		}
		// cgroups covers the v1 controllers (or the v2 root); runc also
		// makes the parent in a hybrid host's unified hierarchy.
		for _, dir := range CgroupDirs(parent) {
			if err := removeCgroupTree(dir); err != nil {
				errs = append(errs, err)
			}
		}
		if left := CgroupDirs(parent); len(left) > 0 {
			errs = append(errs, fmt.Errorf("testenv: cgroups could not be removed: %v", left))
		}
	}
	if s.Netns == "" {
		if objs, err := network.Objects(s.instance(), ""); err == nil && (objs.Bridge != "" || len(objs.Veths)+len(objs.Tables) > 0) {
			if err := network.Destroy(s.instance()); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return leaks, errors.Join(errs...)
}

// killLeft kills, by pid, every process left of s: its process group,
// processes naming its data dir (a runsc sandbox, a runc mid-operation)
// and processes in its cgroups (a container's init and what it forked).
// It waits for them to be gone.
func killLeft(s Scope) error {
	pids := map[int]bool{}
	for _, p := range processes() {
		if (s.PGID > 0 && p.pgid == s.PGID) || names(p.cmdline, s.DataDir) {
			pids[p.pid] = true
		}
	}
	for _, parent := range s.CgroupParents() {
		for _, pid := range cgroups.Procs(parent) {
			pids[pid] = true
		}
		for _, child := range cgroups.Children(parent) {
			for _, pid := range cgroups.Procs(parent + "/" + child) {
				pids[pid] = true
			}
		}
	}
	delete(pids, os.Getpid())
	for pid := range pids {
		unix.Kill(pid, unix.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for pid := range pids {
		for {
			if _, alive := readProc(pid); !alive {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("testenv: process %d survived SIGKILL", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// detachLoop detaches loop device dev (/dev/loopN).
func detachLoop(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("testenv: detaching %s: %w", dev, err)
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("testenv: detaching %s: %w", dev, err)
	}
	return nil
}

// RemoveDir removes dir (a harness's temp dir) unless something is still
// mounted under it: removing through a mount would delete what it holds.
func RemoveDir(dir string) error {
	if left, _ := overlay.MountsUnder(dir); len(left) > 0 {
		return fmt.Errorf("testenv: not removing %s: mounts remain: %v", dir, left)
	}
	return os.RemoveAll(dir)
}

// SweepOptions says where Sweep looks.
type SweepOptions struct {
	// TempRoot is where the harnesses made their dirs (default /tmp).
	TempRoot string
	// Since: dirs older than this are not counted (another run's, or a
	// user's); zero counts every one.
	Since time.Time
	// Keep are cgroup parents that are not the tests' (the default data
	// dir's instance: a daemon the user runs).
	Keep []string
	// NoCgroups skips the host-wide cgroup glob: cgroup parents are named
	// by a hash of their data dir, so they cannot be told apart by where
	// their harness lives. A test whose scopes check their own parents
	// (Scope.CgroupParents) sets it, because another test package's
	// daemons (go test runs packages side by side) make and remove
	// theirs while it runs.
	NoCgroups bool
}

// Sweep is the check after a whole suite, without knowing its daemons:
// nothing of any harness dir (Prefixes under TempRoot) may be left —
// mounts, loop devices, cgroup parents of instances, processes of their
// binaries, the dirs themselves; and with no TempRoot given (the whole
// host's check), nothing of a test registry (sweepRegtest).
func Sweep(o SweepOptions) []Leak {
	hostWide := o.TempRoot == ""
	if o.TempRoot == "" {
		o.TempRoot = "/tmp"
	}
	var out []Leak
	add := func(kind, format string, args ...any) { out = append(out, Leak{kind, fmt.Sprintf(format, args...)}) }
	if hostWide {
		sweepRegtest(add)
	}
	harness := func(path string) bool {
		rel, err := filepath.Rel(o.TempRoot, path)
		if err != nil || strings.HasPrefix(rel, "..") {
			return false
		}
		first, _, _ := strings.Cut(rel, "/")
		return slices.ContainsFunc(Prefixes, func(p string) bool { return strings.HasPrefix(first, p) })
	}
	ms, _ := overlay.MountsUnder(o.TempRoot)
	for _, m := range ms {
		if harness(m) {
			add("mount", "%s", m)
		}
	}
	for dev, file := range loopDevices() {
		if harness(file) {
			add("loop", "%s on %s", dev, file)
		}
	}
	// Every daemon's cgroup parent is berth-<8 hex> (the bench's peer
	// adds a suffix); the harnesses remove theirs.
	for _, dir := range CgroupDirs("/berth-*") {
		if !o.NoCgroups && !slices.Contains(o.Keep, "/"+filepath.Base(dir)) {
			add("cgroup", "%s", dir)
		}
	}
	for _, p := range processes() {
		argv := bytes.Split(p.cmdline, []byte{0})
		if len(argv) > 1 && harness(string(argv[0])) &&
			(filepath.Base(string(argv[0])) == "berth" && string(argv[1]) == "serve" || filepath.Base(string(argv[0])) == AgentName) {
			add("process", "%d %s %s", p.pid, argv[0], argv[1])
		}
	}
	sweepK8s(o.TempRoot, o.Since, add)
	ents, _ := os.ReadDir(o.TempRoot)
	for _, e := range ents {
		p := filepath.Join(o.TempRoot, e.Name())
		if !e.IsDir() || !harness(p) || strings.HasPrefix(e.Name(), "berth-e2e-bin-") {
			continue
		}
		if info, err := e.Info(); err == nil && info.ModTime().After(o.Since) {
			add("file", "%s", p)
		}
	}
	return out
}

// CgroupDirs returns the directories of cgroup parent (e.g. "/berth-1a2b",
// or a glob) in every mounted hierarchy, v1 controllers and unified alike.
func CgroupDirs(parent string) []string {
	var out []string
	for _, base := range []string{cgroups.Root, cgroups.Root + "/*"} {
		ms, _ := filepath.Glob(filepath.Join(base, parent))
		for _, m := range ms {
			if st, err := os.Lstat(m); err == nil && st.IsDir() {
				out = append(out, m)
			}
		}
	}
	return out
}

// removeCgroupTree removes an empty cgroup directory tree, deepest first.
func removeCgroupTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := removeCgroupTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("rmdir %s: %w", dir, err)
	}
	return nil
}

// procRoot is where processes are read from (a test may point it at a
// fake tree).
var procRoot = "/proc"

type proc struct {
	pid, pgid int
	comm      string
	cmdline   []byte // NUL-separated
}

// processes lists the live processes other than this one (zombies are
// their parent's to reap and hold nothing).
func processes() []proc {
	ents, _ := os.ReadDir(procRoot)
	self := os.Getpid()
	var out []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		p, ok := readProc(pid)
		if ok {
			out = append(out, p)
		}
	}
	return out
}

func readProc(pid int) (proc, bool) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return proc{}, false
	}
	// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
	open, closing := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || closing < open {
		return proc{}, false
	}
	f := strings.Fields(string(stat[closing+1:]))
	if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
		return proc{}, false
	}
	pgid, err := strconv.Atoi(f[2])
	if err != nil {
		return proc{}, false
	}
	cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
	return proc{pid: pid, pgid: pgid, comm: string(stat[open+1 : closing]), cmdline: cmdline}, true
}

// groupMembers lists the live members of process group pgid.
func groupMembers(pgid int) []string {
	var out []string
	for _, p := range processes() {
		if p.pgid == pgid {
			out = append(out, fmt.Sprintf("%d (%s)", p.pid, p.comm))
		}
	}
	return out
}

// names reports whether a command line mentions dir or a path under it.
func names(cmdline []byte, dir string) bool {
	if dir == "" {
		return false
	}
	for _, arg := range bytes.Split(cmdline, []byte{0}) {
		for _, part := range strings.Split(string(arg), "=") {
			if under(part, dir) {
				return true
			}
		}
	}
	return false
}

// sysBlock is where loop devices are read from.
var sysBlock = "/sys/block"

// loopDevices maps each attached loop device to its backing file.
func loopDevices() map[string]string {
	out := map[string]string{}
	ms, _ := filepath.Glob(filepath.Join(sysBlock, "loop*", "loop", "backing_file"))
	for _, m := range ms {
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		file := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		out["/dev/"+filepath.Base(filepath.Dir(filepath.Dir(m)))] = file
	}
	return out
}

// under reports whether path is dir or below it.
func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}
