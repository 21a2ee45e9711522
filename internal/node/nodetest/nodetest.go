// Package nodetest is the conformance suite of node.Backend: every backend
// runs Run from its own (root-only, where it drives a host) tests, and
// passing it is what "implements the node backend" means. The suite plays
// the engine: it makes sandbox records as the manager's prepareRecord does
// (template layers, a host id range, owned volumes made before Provision),
// keeps their State as the manager's transitions would, and calls the
// backend in the manager's order. Every case asserts an observable effect
// inside or outside the sandbox, not only that a call returned nil.
//
// Sandboxes are shared between the cases of one runtime class where that
// does not weaken a case (one ephemeral and one persistent sandbox carry
// most of them), so that a class runs in seconds, not minutes.
//
// Cases: provision (twice), freeze and thaw, capture (running and paused)
// then materialize, revert and drop, stop (twice), discard, wipe,
// persist_root, checkpoint and restore where Caps.Checkpoint (a process's
// pid and a shell variable survive), commit of a layer, a sweep that finds a
// sandbox no record accounts for and fixes it, remove (twice) and nothing
// left. A capability a class lacks is not skipped: the suite asserts its
// refusal and that the sandbox still runs; it asks for a capability as the
// engine does (node.Need), and checks that no class claims one its backend
// does not implement. Egress (Allocate, SetRules) is left to test/e2e.
// test/node runs it on the local backend (runc, runsc), test/k8s
// TestConformanceOnRealNode on the Kubernetes backend, and package
// memnode's TestConformance on the in-memory double (a Model harness: no
// exec, files through the agent's file API; see Harness.Model).
package nodetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	pathpkg "path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Harness is a backend under test and what the suite needs to make
// sandbox records for it.
type Harness struct {
	// Backend is a freshly opened backend, not started: Run calls Start
	// and, when it ends, Close. Cleanups newBackend registers run after
	// that Close (a leak check belongs there).
	Backend node.Backend
	// Layers are the template layer ids every sandbox is made of (bottom
	// first, as sandbox.Spec.Layers). The template must have /bin/sh,
	// sleep, cat, hostname and kill, and busybox (its httpd serves the
	// port cases).
	Layers []string
	// HostUsr is the template's host_usr (the builtin template's /usr is
	// the host's).
	HostUsr bool
	// Classes are the runtime classes to run the per-class cases on; nil:
	// every class the backend offers.
	Classes []string
	// FirstSlot is the first host id slot the suite hands out (the store's
	// allocator does in the engine); slots FirstSlot.. must be free.
	FirstSlot int
	// Model: the backend is a model of a node (the in-memory double of
	// package memnode): its sandboxes hold files and states but run no
	// processes of their own, and an exec through their agent would run on
	// the test's host. The suite then never execs: it reads and writes a
	// sandbox's files through the agent's file API and checks everything
	// else of the seam (states, refusals, captures, layers, volumes,
	// sweeps), leaving to the real backends what only a process inside can
	// show (its output and host name, a ticker's memory, a listening port,
	// CPU time, a disk cap the kernel enforces).
	Model bool
}

// Run runs the conformance suite against the backend newBackend returns.
func Run(t *testing.T, newBackend func(t *testing.T) Harness) {
	h := newBackend(t)
	s := &suite{h: h, b: h.Backend, held: map[string]int{}, live: map[string]*sandbox.Sandbox{},
		volumes: map[string]string{}, nextSlot: h.FirstSlot}
	s.b.Start(node.Hooks{Event: s.onEvent, Slots: s.slots})
	t.Cleanup(func() {
		s.removeAll(t)
		s.b.Close(false)
	})
	classes := h.Classes
	if len(classes) == 0 {
		for _, c := range s.b.Classes() {
			classes = append(classes, c.Name)
		}
	}
	if !t.Run("Classes", func(t *testing.T) { s.testClasses(t, classes) }) {
		return
	}
	t.Run("Volumes", s.testVolumes)
	t.Run("Capabilities", s.testCapabilities)
	t.Run("Capacity", s.testCapacity)
	t.Run("IDRange", s.testIDRange)
	for _, class := range classes {
		t.Run(class, func(t *testing.T) { s.runClass(t, class) })
	}
	t.Run("NothingLeft", s.testNothingLeft)
}

// suite is the engine's part: records, id slots, volume ownership.
type suite struct {
	h Harness
	b node.Backend

	mu       sync.Mutex
	held     map[string]int              // id slot by sandbox id
	live     map[string]*sandbox.Sandbox // records made and not removed
	volumes  map[string]string           // volume id -> owning sandbox id ("" none)
	nextSlot int
	events   []*sandbox.Event
	captures []string // made by cases; dropped again at the end
}

func (s *suite) onEvent(ev *sandbox.Event) {
	s.mu.Lock()
	s.events = append(s.events, ev)
	s.mu.Unlock()
}

func (s *suite) slots(context.Context) (map[string]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.held), nil
}

// sbOpts shape a new record.
type sbOpts struct {
	persistent, persistRoot bool
	layers                  []string // default: the harness's
}

// newSandbox makes the record of a new sandbox of class as the engine
// does before Provision: its host id range assigned, its owned workspace
// volume made. It is registered for removal at the end of the suite.
func (s *suite) newSandbox(t *testing.T, class string, o sbOpts) *sandbox.Sandbox {
	t.Helper()
	id := newID()
	layers := o.layers
	if layers == nil {
		layers = s.h.Layers
	}
	sb := &sandbox.Sandbox{ID: id, State: sandbox.StateCreating, CreatedAt: time.Now(), UpdatedAt: time.Now(),
		Spec: sandbox.Spec{
			Template: "nodetest", Runtime: class, Persistent: o.persistent, PersistRoot: o.persistRoot,
			Resources: sandbox.Resources{CPUs: 1, MemoryBytes: 256 << 20, Pids: 256, DiskBytes: diskCap},
			Layers:    slices.Clone(layers), HostUsr: s.h.HostUsr,
		}}
	if o.persistent {
		size, inodes, err := s.b.NormalizeVolume(volumeSize, 0)
		if err != nil {
			t.Fatalf("NormalizeVolume(%d): %v", volumeSize, err)
		}
		sb.Spec.VolumeSize, sb.Spec.VolumeInodes = size, inodes
		sb.Spec.Volumes = []sandbox.VolumeMount{{VolumeID: newID(), Path: "/workspace", Owned: true}}
	}
	s.assignIDs(sb)
	if err := sb.Spec.Validate(); err != nil {
		t.Fatalf("the suite's record is invalid: %v", err)
	}
	s.mu.Lock()
	s.live[sb.ID] = sb
	s.mu.Unlock()
	s.makeVolumes(t, sb)
	return sb
}

// childSpec is the record of a sandbox made from a capture of parent, as
// a fork's child: new owned volumes, its own id range.
func (s *suite) newChild(t *testing.T, parent *sandbox.Sandbox) *sandbox.Sandbox {
	t.Helper()
	sb := &sandbox.Sandbox{ID: newID(), State: sandbox.StateCreating, CreatedAt: time.Now(), UpdatedAt: time.Now(),
		Spec: parent.Spec}
	sb.Spec.Parent, sb.Spec.IDs, sb.Spec.Volumes = parent.ID, nil, nil
	sb.Spec.Layers = slices.Clone(parent.Spec.Layers)
	for _, vm := range parent.Spec.Volumes {
		if vm.Owned {
			sb.Spec.Volumes = append(sb.Spec.Volumes, sandbox.VolumeMount{VolumeID: newID(), Path: vm.Path, Owned: true})
		}
	}
	s.assignIDs(sb)
	s.mu.Lock()
	s.live[sb.ID] = sb
	s.mu.Unlock()
	return sb
}

// assignIDs gives sb a host id range: a fresh slot, or the shared range.
func (s *suite) assignIDs(sb *sandbox.Sandbox) {
	if shared, own := s.b.IDRange(-1); !own {
		sb.Spec.IDs = &shared
		return
	}
	s.mu.Lock()
	slot := s.nextSlot
	s.nextSlot++
	s.held[sb.ID] = slot
	s.mu.Unlock()
	ids, _ := s.b.IDRange(slot)
	sb.Spec.IDs = &ids
}

// makeVolumes makes sb's owned volumes, as the engine's attachVolumes
// does before every Provision.
func (s *suite) makeVolumes(t *testing.T, sb *sandbox.Sandbox) {
	t.Helper()
	for _, vm := range sb.Spec.Volumes {
		if !vm.Owned {
			continue
		}
		s.mu.Lock()
		s.volumes[vm.VolumeID] = sb.ID
		s.mu.Unlock()
		if err := s.b.CreateVolume(vm.VolumeID, sb.Spec.VolumeSize, sb.Spec.VolumeInodes); err != nil {
			t.Fatalf("CreateVolume %s: %v", vm.VolumeID, err)
		}
	}
}

// provision starts sb (a create, or a start of a stopped one) and records
// it running.
func (s *suite) provision(t *testing.T, sb *sandbox.Sandbox) {
	t.Helper()
	if sb.State == sandbox.StateStopped {
		sb.State = sandbox.StateStarting
	}
	s.makeVolumes(t, sb)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := s.b.Provision(ctx, sb); err != nil {
		t.Fatalf("Provision %s (%s): %v", sb.ID, sb.Spec.Runtime, err)
	}
	t.Logf("provisioned %s (%s) in %s", sb.ID, class(s.b, sb), time.Since(t0).Round(time.Millisecond))
	sb.State = sandbox.StateRunning
}

// stop stops sb and discards what does not persist, as the engine's stop.
func (s *suite) stop(t *testing.T, sb *sandbox.Sandbox) {
	t.Helper()
	sb.State = sandbox.StateStopping
	if err := s.b.Stop(t.Context(), sb); err != nil {
		t.Fatalf("Stop %s: %v", sb.ID, err)
	}
	if err := s.b.Discard(t.Context(), sb); err != nil {
		t.Fatalf("Discard %s: %v", sb.ID, err)
	}
	sb.State = sandbox.StateStopped
}

// remove deletes sb's host side and releases its volumes and slot, as
// the engine's destroy, and checks that nothing of it is left.
func (s *suite) remove(t *testing.T, sb *sandbox.Sandbox) {
	t.Helper()
	sb.State = sandbox.StateDeleting
	if err := s.b.Remove(context.WithoutCancel(t.Context()), sb); err != nil {
		t.Errorf("Remove %s: %v", sb.ID, err)
		return
	}
	s.release(t, sb)
}

func (s *suite) release(t *testing.T, sb *sandbox.Sandbox) {
	t.Helper()
	for _, vm := range sb.Spec.Volumes {
		if vm.Owned {
			if err := s.b.DeleteVolume(vm.VolumeID); err != nil {
				t.Errorf("DeleteVolume %s: %v", vm.VolumeID, err)
				continue
			}
			s.mu.Lock()
			delete(s.volumes, vm.VolumeID)
			s.mu.Unlock()
		}
	}
	s.b.Forget(sb)
	sb.State = sandbox.StateDeleted
	s.mu.Lock()
	delete(s.live, sb.ID)
	delete(s.held, sb.ID)
	s.mu.Unlock()
}

// removeAll removes what a failed case left, so that the backend's Close
// and the harness's leak check see only what the backend itself leaks.
func (s *suite) removeAll(t *testing.T) {
	s.mu.Lock()
	left := slices.Collect(maps.Values(s.live))
	vols := slices.Collect(maps.Keys(s.volumes))
	s.mu.Unlock()
	ctx := context.Background()
	for _, sb := range left {
		if err := s.b.Remove(ctx, sb); err != nil {
			t.Errorf("cleanup: Remove %s: %v", sb.ID, err)
		}
		s.release(t, sb)
	}
	for _, name := range s.captures {
		if err := s.dropCapture(name); err != nil {
			t.Errorf("cleanup: DropCapture %s: %v", name, err)
		}
	}
	for _, v := range vols {
		if err := s.b.DeleteVolume(v); err != nil {
			t.Errorf("cleanup: DeleteVolume %s: %v", v, err)
		}
	}
}

// sweepInput is what the engine hands a sweep: the records in live (all
// of the suite's, but those in omit).
func (s *suite) sweepInput(omit ...string) node.SweepInput {
	s.mu.Lock()
	live := maps.Clone(s.live)
	s.mu.Unlock()
	for _, id := range omit {
		delete(live, id)
	}
	return node.SweepInput{
		Live:    live,
		Busy:    func(string) bool { return false },
		TryLock: func(string) (func(), bool) { return func() {}, true },
		VolumeOwner: func(vid string) (string, bool) {
			s.mu.Lock()
			defer s.mu.Unlock()
			owner, ok := s.volumes[vid]
			if ok && live[owner] == nil {
				owner = ""
			}
			return owner, ok
		},
		Snapshot: func(string) bool { return false },
	}
}

// finding is one thing a sweep reported.
type finding struct {
	kind, id, detail string
	fix              func() error
}

func (f finding) String() string { return f.kind + " " + f.id + ": " + f.detail }

func (s *suite) sweep(ctx context.Context, in node.SweepInput) []finding {
	var out []finding
	s.b.Sweep(ctx, in, func(kind, id, detail string, fix func() error) {
		out = append(out, finding{kind, id, detail, fix})
	})
	return out
}

// sh runs script in sb with /bin/sh and returns its stdout; a non-zero
// exit fails the test.
func (s *suite) sh(t *testing.T, sb *sandbox.Sandbox, script string) string {
	t.Helper()
	if s.h.Model {
		t.Fatalf("the suite would exec %q in a sandbox of a model backend (it would run on the host)", script)
	}
	out, errOut, code, err := s.run(t.Context(), sb, script, 30*time.Second)
	if err != nil {
		t.Fatalf("exec %q in %s: %v", script, sb.ID, err)
	}
	if code != 0 {
		t.Fatalf("exec %q in %s: exit %d: %s%s", script, sb.ID, code, out, errOut)
	}
	return out
}

func (s *suite) run(ctx context.Context, sb *sandbox.Sandbox, script string, timeout time.Duration) (stdout, stderr string, code int, err error) {
	if s.h.Model {
		return "", "", -1, fmt.Errorf("nodetest: no exec in a sandbox of a model backend (it would run on the host): %q", script)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var o, e bytes.Buffer
	exit, err := s.b.Agent(sb).Exec(ctx, agent.ExecRequest{
		Argv: []string{"/bin/sh", "-c", script},
		Env:  []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"},
		Dir:  "/",
	}, agent.ExecIO{Stdout: &o, Stderr: &e})
	return o.String(), e.String(), exit.Code, err
}

// exists reports whether path exists in running sb.
func (s *suite) exists(t *testing.T, sb *sandbox.Sandbox, path string) bool {
	t.Helper()
	if s.h.Model {
		_, err := s.b.Agent(sb).Stat(t.Context(), path)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("stat %s in %s: %v", path, sb.ID, err)
		}
		return err == nil
	}
	return strings.TrimSpace(s.sh(t, sb, "if [ -e "+path+" ]; then echo yes; else echo no; fi")) == "yes"
}

// write puts line (and a newline) in file path of running sb, making its
// directory, as `mkdir -p DIR && echo LINE > PATH`.
func (s *suite) write(t *testing.T, sb *sandbox.Sandbox, path, line string) {
	t.Helper()
	if !s.h.Model {
		s.sh(t, sb, "mkdir -p "+pathpkg.Dir(path)+" && echo "+line+" > "+path)
		return
	}
	c := s.b.Agent(sb)
	if err := c.Mkdir(t.Context(), pathpkg.Dir(path), 0o755, true); err != nil {
		t.Fatalf("mkdir %s in %s: %v", pathpkg.Dir(path), sb.ID, err)
	}
	if _, err := c.WriteFile(t.Context(), path, 0o644, strings.NewReader(line+"\n")); err != nil {
		t.Fatalf("writing %s in %s: %v", path, sb.ID, err)
	}
}

// read returns what paths of running sb hold, one after the other, as
// `cat PATH...`.
func (s *suite) read(t *testing.T, sb *sandbox.Sandbox, paths ...string) string {
	t.Helper()
	if !s.h.Model {
		return s.sh(t, sb, "cat "+strings.Join(paths, " "))
	}
	var buf bytes.Buffer
	for _, p := range paths {
		if _, err := s.b.Agent(sb).ReadFile(t.Context(), p, &buf); err != nil {
			t.Fatalf("reading %s in %s: %v", p, sb.ID, err)
		}
	}
	return buf.String()
}

// entries lists the names in directory dir of running sb, as `ls -A DIR`.
func (s *suite) entries(t *testing.T, sb *sandbox.Sandbox, dir string) string {
	t.Helper()
	if !s.h.Model {
		return s.sh(t, sb, "ls -A "+dir)
	}
	fis, err := s.b.Agent(sb).List(t.Context(), dir)
	if err != nil {
		t.Fatalf("listing %s in %s: %v", dir, sb.ID, err)
	}
	var out strings.Builder
	for _, fi := range fis {
		out.WriteString(fi.Name + "\n")
	}
	return out.String()
}

func (s *suite) status(t *testing.T, sb *sandbox.Sandbox) node.Status {
	t.Helper()
	st, err := s.b.Status(t.Context(), sb)
	if err != nil {
		t.Fatalf("Status %s: %v", sb.ID, err)
	}
	return st
}

func class(b node.Backend, sb *sandbox.Sandbox) string {
	if sb.Spec.Runtime != "" {
		return sb.Spec.Runtime
	}
	return b.Classes()[0].Name
}

const (
	diskCap    = 128 << 20
	volumeSize = 64 << 20
)

// newID returns 16 random characters of [a-z0-9], the engine's id form.
func newID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b[:])
}

// eventually polls cond every 20 ms until it holds or d passes.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
