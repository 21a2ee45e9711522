// Package memnode is an in-memory node.Backend: a test double of a whole
// host, so the engine's unit tests run as any user, without runc, loop
// devices, cgroups or nftables.
//
// What it models, per sandbox: whether it is provisioned, its processes'
// status (running, paused, stopped, gone), its files (the committed layers
// it names laid down, /workspace, its volumes' mount points; a stop's
// Discard drops all but the volumes' paths unless persist_root), its host
// name, its egress rules (applied or cut), its hibernation checkpoint and
// its volumes; captures are copies of a sandbox's files kept in memory (a
// map of path to content), and so are committed layers. Each class
// refuses, as not supported, what its Caps lack (freeze and thaw,
// quarantine reads and cut, capture, diff, layer commits, persist_root,
// renames), and Admit refuses what exceeds Capacity. Its agent is real: agent.Serve on a unix socket in
// a private temporary directory, its Root the sandbox's own directory, so
// file operations are the agent's own and confined to it. Exec therefore
// runs real processes as the test's user with "/" as their default working
// directory — tests must only run harmless commands (true, sh -c 'echo').
// Nothing here sends a packet off the machine: ports are in-process pipes
// (Listen), addresses are never configured anywhere.
//
// Every method is recorded (Calls) and can be made to fail (FailNext), so
// tests can assert what the engine did and what it undid.
//
// Classes are configurable: fake-runc (pool, freeze, rename, egress),
// fake-runsc (checkpoint, ports via the agent) and, with WithClasses,
// fake-pod (pool without freeze or rename, like a Kubernetes pod);
// SetDefault models a restart with another --runtime; FailNextFor fails a
// method for one sandbox; Methods lists the calls in order.
//
// It passes the node conformance suite (nodetest, as a Model harness:
// files through the agent's file API, no exec); it does not model what
// only a process inside a real sandbox shows (exec's host name, a root of
// its own, CPU time, a disk cap, a volume's use).
package memnode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/agent/agentd"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/secrets/egressproxy"
)

// The classes New offers unless told otherwise: one like runc (pool,
// freeze, rename, egress) and one like runsc (checkpoint, ports through
// the agent, no egress). FakePod, offered only through WithClasses, is
// like a Kubernetes pod: warm pools, but no freeze and no rename, so its
// pool members wait running and keep their host names.
var (
	FakeRunc  = node.Class{Name: "fake-runc", Caps: node.Caps{InheritFDs: true, Egress: true, Pool: true, Freeze: true, Rename: true, Capture: true, RootLayer: true, Sudo: true}}
	FakeRunsc = node.Class{Name: "fake-runsc", Caps: node.Caps{Checkpoint: true, PortsViaAgent: true, Freeze: true, Capture: true, RootLayer: true, Sudo: true}}
	FakePod   = node.Class{Name: "fake-pod", Caps: node.Caps{Pool: true, PortsViaAgent: true}}
)

// Capacity is the storage pool's size the node reports.
const Capacity = 1 << 40

// Call is one recorded method call.
type Call struct {
	Method string
	ID     string // the sandbox, volume or capture it was about
	Arg    string // e.g. "cut" for SetRules, the name for SetHostname
}

func (c Call) String() string {
	s := c.Method + "(" + c.ID
	if c.Arg != "" {
		s += ", " + c.Arg
	}
	return s + ")"
}

// Sandbox is what the node holds of one sandbox.
type Sandbox struct {
	ID          string
	Class       string
	Provisioned bool
	Status      node.Status
	Hostname    string
	// RulesCut: the sandbox's egress is cut (quarantine); Rules are the
	// rules last applied.
	RulesCut   bool
	Rules      []string
	Hibernated bool
	Persistent bool
	// Root is the host directory the sandbox's agent serves files from.
	Root string

	agentStop func()
}

type failure struct {
	id  string // "" any
	err error
}

type capture struct {
	files map[string]file
	inUse int
}

type file struct {
	data []byte
	mode fs.FileMode
	dir  bool
}

// Node is the in-memory backend. Its zero value is not usable; see New.
type Node struct {
	tb      testing.TB
	dir     string // sandbox roots
	sockDir string // agent sockets (short paths)

	mu        sync.Mutex
	classes   []node.Class
	sbs       map[string]*Sandbox
	captures  map[string]*capture
	layers    map[string]map[string]file // committed layers' files, by layer id
	volumes   map[string][2]int64
	calls     []Call
	fail      map[string][]failure
	ports     map[string]map[int]func(net.Conn)
	cpu       map[string]time.Duration
	nextAddr  int
	hooks     node.Hooks
	started   bool
	closed    int
	captureNo int
	layerNo   int
}

// Option configures a Node.
type Option func(*Node)

// WithClasses replaces the classes offered; the first is the default.
func WithClasses(cls ...node.Class) Option {
	return func(n *Node) { n.classes = slices.Clone(cls) }
}

// New returns a node whose sandboxes live under tb's temporary directory;
// every agent it started is stopped when tb ends.
func New(tb testing.TB, opts ...Option) *Node {
	tb.Helper()
	sockDir, err := os.MkdirTemp("", "memnode")
	if err != nil {
		tb.Fatal(err)
	}
	n := &Node{
		tb: tb, dir: tb.TempDir(), sockDir: sockDir,
		classes:  []node.Class{FakeRunc, FakeRunsc},
		sbs:      map[string]*Sandbox{},
		captures: map[string]*capture{},
		layers:   map[string]map[string]file{},
		volumes:  map[string][2]int64{},
		fail:     map[string][]failure{},
		ports:    map[string]map[int]func(net.Conn){},
		cpu:      map[string]time.Duration{},
	}
	for _, o := range opts {
		o(n)
	}
	tb.Cleanup(n.shutdown)
	return n
}

// shutdown stops every agent: the host going away at the end of a test.
func (n *Node) shutdown() {
	n.mu.Lock()
	var stops []func()
	for _, s := range n.sbs {
		if s.agentStop != nil {
			stops = append(stops, s.agentStop)
			s.agentStop = nil
		}
	}
	n.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	os.RemoveAll(n.sockDir)
}

// SetDefault makes class name the default (a daemon restarted with
// another --runtime).
func (n *Node) SetDefault(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	i := slices.IndexFunc(n.classes, func(c node.Class) bool { return c.Name == name })
	if i < 0 {
		n.tb.Fatalf("memnode: no class %q", name)
	}
	c := n.classes[i]
	n.classes = append([]node.Class{c}, slices.Delete(n.classes, i, i+1)...)
}

// FailNext makes the next call of method fail with err. Calls queue up:
// FailNext twice fails the next two.
func (n *Node) FailNext(method string, err error) { n.FailNextFor(method, "", err) }

// FailNextFor makes the next call of method about id fail with err.
func (n *Node) FailNextFor(method, id string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fail[method] = append(n.fail[method], failure{id: id, err: err})
}

// failing records a call and returns the failure injected for it, if any.
// The caller holds n.mu.
func (n *Node) failing(method, id, arg string) error {
	n.calls = append(n.calls, Call{Method: method, ID: id, Arg: arg})
	q := n.fail[method]
	for i, f := range q {
		if f.id == "" || f.id == id {
			n.fail[method] = slices.Delete(q, i, i+1)
			return f.err
		}
	}
	return nil
}

// Calls returns the recorded calls about id ("" all), oldest first.
func (n *Node) Calls(id string) []Call {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []Call
	for _, c := range n.calls {
		if id == "" || c.ID == id {
			out = append(out, c)
		}
	}
	return out
}

// Methods returns the names of the recorded calls about id, oldest first,
// restricted to the given methods if any are named.
func (n *Node) Methods(id string, only ...string) []string {
	var out []string
	for _, c := range n.Calls(id) {
		if len(only) == 0 || slices.Contains(only, c.Method) {
			out = append(out, c.Method)
		}
	}
	return out
}

// ResetCalls forgets the recorded calls.
func (n *Node) ResetCalls() {
	n.mu.Lock()
	n.calls = nil
	n.mu.Unlock()
}

// Get returns a copy of what the node holds of sandbox id.
func (n *Node) Get(id string) (Sandbox, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s, ok := n.sbs[id]
	if !ok {
		return Sandbox{}, false
	}
	c := *s
	c.Rules = slices.Clone(s.Rules)
	c.agentStop = nil
	return c, true
}

// Captures lists the captures held, sorted.
func (n *Node) Captures() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.captures))
	for name := range n.captures {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// Volumes lists the volumes held, sorted.
func (n *Node) Volumes() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.volumes))
	for id := range n.volumes {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// Crash ends sandbox id's processes behind the engine's back (an OOM, a
// host reboot): its status becomes gone.
func (n *Node) Crash(id string) {
	n.mu.Lock()
	s := n.sbs[id]
	var stop func()
	if s != nil {
		s.Status = node.StatusGone
		stop, s.agentStop = s.agentStop, nil
	}
	n.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// SetCPU sets the CPU time sandbox id has used (idle detection).
func (n *Node) SetCPU(id string, d time.Duration) {
	n.mu.Lock()
	n.cpu[id] = d
	n.mu.Unlock()
}

// Listen makes port of sandbox id answer: every DialPort is served by h
// on the other end of an in-process pipe.
func (n *Node) Listen(id string, port int, h func(net.Conn)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ports[id] == nil {
		n.ports[id] = map[int]func(net.Conn){}
	}
	n.ports[id][port] = h
}

// Hooks returns what the engine passed to Start.
func (n *Node) Hooks() node.Hooks {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.hooks
}

func (n *Node) classOf(name string) (node.Class, bool) {
	if name == "" {
		return n.classes[0], true
	}
	for _, c := range n.classes {
		if c.Name == name {
			return c, true
		}
	}
	return node.Class{}, false
}

// sbLocked returns id's entry, made if needed. The caller holds n.mu.
func (n *Node) sbLocked(sb *sandbox.Sandbox) *Sandbox {
	s := n.sbs[sb.ID]
	if s == nil {
		s = &Sandbox{ID: sb.ID, Status: node.StatusGone, Root: filepath.Join(n.dir, sb.ID, "root")}
		n.sbs[sb.ID] = s
	}
	s.Persistent = sb.Spec.Persistent
	return s
}

// startAgent serves s's agent unless it runs. The caller holds n.mu.
func (n *Node) startAgent(s *Sandbox) error {
	if s.agentStop != nil {
		return nil
	}
	if err := os.MkdirAll(s.Root, 0o755); err != nil {
		return err
	}
	sock := n.socket(s.ID)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agentd.Serve(ctx, agentd.Config{Socket: sock, Root: s.Root}) }()
	// Answering, as a provisioned sandbox's agent is. Dialled directly:
	// the node's own dialer takes n.mu, which the caller holds.
	c := agent.NewClient(sock)
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Ping(pctx)
		pcancel()
		if err == nil {
			break
		}
		select {
		case err := <-done:
			cancel()
			return fmt.Errorf("memnode: agent of %s: %v", s.ID, err)
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			return fmt.Errorf("memnode: agent of %s does not answer: %w", s.ID, err)
		}
		time.Sleep(time.Millisecond)
	}
	s.agentStop = func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				n.tb.Logf("memnode: agent of %s: %v", s.ID, err)
			}
		case <-time.After(10 * time.Second):
			n.tb.Errorf("memnode: agent of %s did not stop", s.ID)
		}
	}
	return nil
}

// stopAgent stops s's agent. The caller holds n.mu; the stop runs after
// it is released (the returned func).
func stopAgent(s *Sandbox) func() {
	stop := s.agentStop
	s.agentStop = nil
	if stop == nil {
		return func() {}
	}
	return stop
}

func (n *Node) socket(id string) string {
	return filepath.Join(n.sockDir, id[:min(len(id), 16)]+".sock")
}

// dialer connects to id's agent; unless outside, only while its processes
// run (a frozen agent answers nothing; here it refuses at once).
func (n *Node) dialer(id string, outside bool) func(context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		n.mu.Lock()
		s := n.sbs[id]
		ok := s != nil && (outside || s.Status == node.StatusRunning)
		n.mu.Unlock()
		if !ok {
			return nil, errdefs.Unavailable("memnode: the agent of %s is not running", id)
		}
		var d net.Dialer
		return d.DialContext(ctx, "unix", n.socket(id))
	}
}

// Provision lays sb down and starts its agent.
func (n *Node) Provision(ctx context.Context, sb *sandbox.Sandbox) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("Provision", sb.ID, ""); err != nil {
		return err
	}
	if len(sb.Spec.Layers) == 0 {
		return errors.New("memnode: provision without layers")
	}
	cls, ok := n.classOf(sb.Spec.Runtime)
	if !ok {
		return fmt.Errorf("memnode: no runtime class %q", sb.Spec.Runtime)
	}
	if sb.Spec.PersistRoot && !cls.Caps.RootLayer {
		return errdefs.NotSupported("memnode: class %s keeps no root layer: persist_root is not available", cls.Name)
	}
	for _, vm := range sb.Spec.Volumes {
		if _, ok := n.volumes[vm.VolumeID]; !ok {
			return fmt.Errorf("memnode: volume %s does not exist", vm.VolumeID)
		}
	}
	s := n.sbLocked(sb)
	s.Class, s.Provisioned, s.Hostname = cls.Name, true, sb.Hostname()
	if err := n.layDown(s, sb); err != nil {
		return err
	}
	if err := n.startAgent(s); err != nil {
		return err
	}
	s.Status = node.StatusRunning
	return nil
}

// layDown gives s what its template shows: the files of the committed
// layers among sb's (where the sandbox has none of its own there; a file
// the sandbox removed comes back, as no whiteout is kept), the default
// working directory /workspace, and its volumes' mount points (a
// volume's files are those under its path in the sandbox's). The caller
// holds n.mu.
func (n *Node) layDown(s *Sandbox, sb *sandbox.Sandbox) error {
	for _, id := range sb.Spec.Layers {
		files := map[string]file{}
		for p, f := range n.layers[id] {
			if _, err := os.Lstat(filepath.Join(s.Root, filepath.FromSlash(p))); errors.Is(err, fs.ErrNotExist) {
				files[p] = f
			}
		}
		if err := writeTree(s.Root, files); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(s.Root, "workspace"), 0o755); err != nil {
		return err
	}
	for _, vm := range sb.Spec.Volumes {
		if err := os.MkdirAll(filepath.Join(s.Root, filepath.FromSlash(vm.Path)), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// Stop ends sb's processes, keeping its files.
func (n *Node) Stop(ctx context.Context, sb *sandbox.Sandbox) error {
	n.mu.Lock()
	if err := n.failing("Stop", sb.ID, ""); err != nil {
		n.mu.Unlock()
		return err
	}
	s := n.sbLocked(sb)
	stop := stopAgent(s)
	s.Status = node.StatusStopped
	n.mu.Unlock()
	stop()
	return nil
}

// Discard empties the files of a stopped ephemeral sandbox.
func (n *Node) Discard(ctx context.Context, sb *sandbox.Sandbox) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("Discard", sb.ID, ""); err != nil {
		return err
	}
	s := n.sbLocked(sb)
	switch {
	case !sb.Spec.Persistent:
		return emptyDir(s.Root)
	case !sb.Spec.PersistRoot:
		// The root layer goes; the volumes' files stay.
		return emptyBut(s.Root, sb.Spec.Volumes)
	}
	return nil
}

// Wipe empties a stopped sandbox's files.
func (n *Node) Wipe(ctx context.Context, sb *sandbox.Sandbox) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("Wipe", sb.ID, ""); err != nil {
		return err
	}
	s := n.sbLocked(sb)
	if s.Status == node.StatusRunning || s.Status == node.StatusPaused {
		return errdefs.Conflict("memnode: wipe of %s while it runs", sb.ID)
	}
	return emptyDir(s.Root)
}

// Remove deletes everything of sb but its volumes.
func (n *Node) Remove(ctx context.Context, sb *sandbox.Sandbox) error {
	n.mu.Lock()
	if err := n.failing("Remove", sb.ID, ""); err != nil {
		n.mu.Unlock()
		return err
	}
	s := n.sbs[sb.ID]
	stop := func() {}
	if s != nil {
		stop = stopAgent(s)
		delete(n.sbs, sb.ID)
		delete(n.ports, sb.ID)
	}
	n.mu.Unlock()
	stop()
	return os.RemoveAll(filepath.Join(n.dir, sb.ID))
}

// Freeze stops sb's processes in place.
func (n *Node) Freeze(ctx context.Context, sb *sandbox.Sandbox) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("Freeze", sb.ID, ""); err != nil {
		return err
	}
	s := n.sbLocked(sb)
	if cls, _ := n.classOf(s.Class); !cls.Caps.Freeze {
		return errdefs.NotSupported("memnode: class %s cannot freeze", cls.Name)
	}
	switch s.Status {
	case node.StatusRunning, node.StatusPaused:
		s.Status = node.StatusPaused
		return nil
	}
	return errdefs.Conflict("memnode: freeze of %s, which is %s", sb.ID, s.Status)
}

// Thaw continues sb's processes.
func (n *Node) Thaw(ctx context.Context, sb *sandbox.Sandbox) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("Thaw", sb.ID, ""); err != nil {
		return err
	}
	s := n.sbLocked(sb)
	if cls, _ := n.classOf(s.Class); !cls.Caps.Freeze {
		return errdefs.NotSupported("memnode: class %s cannot freeze, so nothing thaws", cls.Name)
	}
	switch s.Status {
	case node.StatusRunning, node.StatusPaused:
		s.Status = node.StatusRunning
		return nil
	}
	return errdefs.Conflict("memnode: thaw of %s, which is %s", sb.ID, s.Status)
}

// Status reports sb's processes.
func (n *Node) Status(ctx context.Context, sb *sandbox.Sandbox) (node.Status, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("Status", sb.ID, ""); err != nil {
		return "", err
	}
	if s := n.sbs[sb.ID]; s != nil {
		return s.Status, nil
	}
	return node.StatusGone, nil
}

// Exited reports that no process of sb runs.
func (n *Node) Exited(sb *sandbox.Sandbox) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.sbs[sb.ID]
	return s == nil || s.Status == node.StatusGone || s.Status == node.StatusStopped
}

// KillAll ends sb's processes.
func (n *Node) KillAll(ctx context.Context, sb *sandbox.Sandbox) error {
	n.mu.Lock()
	if err := n.failing("KillAll", sb.ID, ""); err != nil {
		n.mu.Unlock()
		return err
	}
	stop := func() {}
	if s := n.sbs[sb.ID]; s != nil {
		stop = stopAgent(s)
		s.Status = node.StatusGone
	}
	n.mu.Unlock()
	stop()
	return nil
}

// SetHostname renames a running sandbox; a class without Caps.Rename
// refuses.
func (n *Node) SetHostname(ctx context.Context, sb *sandbox.Sandbox, name string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("SetHostname", sb.ID, name); err != nil {
		return err
	}
	s := n.sbLocked(sb)
	if cls, _ := n.classOf(s.Class); !cls.Caps.Rename {
		return errdefs.NotSupported("memnode: class %s cannot change a host name", cls.Name)
	}
	s.Hostname = name
	return nil
}

// Agent returns the client of sb's agent, which answers while sb runs.
func (n *Node) Agent(sb *sandbox.Sandbox) *agent.Client {
	return agent.NewClientDialer(n.dialer(sb.ID, false))
}

// WaitReady pings sb's agent.
func (n *Node) WaitReady(ctx context.Context, sb *sandbox.Sandbox) error {
	_, err := n.Agent(sb).Ping(ctx)
	return err
}

// DialPort connects to a port Listen made answer.
func (n *Node) DialPort(ctx context.Context, sb *sandbox.Sandbox, port int) (net.Conn, error) {
	n.mu.Lock()
	if err := n.failing("DialPort", sb.ID, fmt.Sprint(port)); err != nil {
		n.mu.Unlock()
		return nil, err
	}
	s := n.sbs[sb.ID]
	h := n.ports[sb.ID][port]
	n.mu.Unlock()
	if s == nil || s.Status != node.StatusRunning {
		return nil, errdefs.Unavailable("sandbox %s is not running", sb.ID)
	}
	if h == nil {
		return nil, errdefs.Unreachable("nothing listens on port %d of sandbox %s", port, sb.ID)
	}
	a, b := net.Pipe()
	go h(b)
	return a, nil
}

// InitLog returns nothing: the agent's logs are discarded.
func (n *Node) InitLog(sb *sandbox.Sandbox, max int, wait time.Duration) string { return "" }

// Forget drops sb.
func (n *Node) Forget(sb *sandbox.Sandbox) {
	n.mu.Lock()
	n.calls = append(n.calls, Call{Method: "Forget", ID: sb.ID})
	n.mu.Unlock()
}

// Capture copies sb's files under name.
func (n *Node) Capture(ctx context.Context, sb *sandbox.Sandbox, name string) (node.Capture, func(), error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("Capture", sb.ID, name); err != nil {
		return node.Capture{}, nil, err
	}
	s := n.sbLocked(sb)
	if err := n.classCan(s.Class, sb, func(c node.Caps) bool { return c.Capture }, "capture files"); err != nil {
		return node.Capture{}, nil, err
	}
	if _, ok := n.captures[name]; ok {
		return node.Capture{}, nil, fmt.Errorf("memnode: capture %s exists", name)
	}
	files, err := readTree(s.Root)
	if err != nil {
		return node.Capture{}, nil, err
	}
	c := &capture{files: files, inUse: 1}
	n.captures[name] = c
	var size int64
	for _, f := range files {
		size += int64(len(f.data))
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			n.mu.Lock()
			c.inUse--
			n.mu.Unlock()
		})
	}
	return node.Capture{Name: name, Frozen: time.Microsecond, SizeBytes: size}, release, nil
}

// Materialize writes capture name as new sandbox sb's files.
func (n *Node) Materialize(ctx context.Context, sb *sandbox.Sandbox, name string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("Materialize", sb.ID, name); err != nil {
		return err
	}
	if err := n.classCan("", sb, func(c node.Caps) bool { return c.Capture }, "capture files"); err != nil {
		return err
	}
	c, ok := n.captures[name]
	if !ok {
		return node.ErrNoCapture
	}
	s := n.sbLocked(sb)
	return writeTree(s.Root, c.files)
}

// Revert replaces stopped sb's files with capture name's.
func (n *Node) Revert(ctx context.Context, sb *sandbox.Sandbox, name string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("Revert", sb.ID, name); err != nil {
		return err
	}
	if err := n.classCan("", sb, func(c node.Caps) bool { return c.Capture }, "capture files"); err != nil {
		return err
	}
	c, ok := n.captures[name]
	if !ok {
		return node.ErrNoCapture
	}
	s := n.sbLocked(sb)
	if err := emptyDir(s.Root); err != nil {
		return err
	}
	return writeTree(s.Root, c.files)
}

// DropCapture removes capture name.
func (n *Node) DropCapture(name string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("DropCapture", name, ""); err != nil {
		return err
	}
	if name == "" || strings.ContainsAny(name, "/\\") || strings.Contains(name, "..") {
		return errdefs.Invalid("memnode: bad capture name %q", name)
	}
	delete(n.captures, name)
	return nil
}

// CaptureName returns a fresh capture name for a fork of parent.
func (n *Node) CaptureName(parent string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.captureNo++
	return fmt.Sprintf("fork-%s-%d", parent, n.captureNo)
}

// Checkpoint saves sb's processes (classes with Checkpoint only) and ends
// them.
func (n *Node) Checkpoint(ctx context.Context, sb *sandbox.Sandbox) (node.Checkpoint, bool, error) {
	n.mu.Lock()
	if err := n.failing("Checkpoint", sb.ID, ""); err != nil {
		n.mu.Unlock()
		return node.Checkpoint{}, true, err
	}
	s := n.sbLocked(sb)
	if cls, _ := n.classOf(s.Class); !cls.Caps.Checkpoint {
		n.mu.Unlock()
		return node.Checkpoint{}, true, errdefs.Conflict("memnode: class %s cannot checkpoint", cls.Name)
	}
	if s.Status != node.StatusRunning && s.Status != node.StatusPaused {
		n.mu.Unlock()
		return node.Checkpoint{}, true, errdefs.Conflict("memnode: checkpoint of %s, which is %s", sb.ID, s.Status)
	}
	stop := stopAgent(s)
	s.Status, s.Hibernated = node.StatusStopped, true
	n.mu.Unlock()
	stop()
	return node.Checkpoint{Took: time.Millisecond, SizeBytes: 4096}, false, nil
}

// Hibernated reports whether sb has a checkpoint.
func (n *Node) Hibernated(sb *sandbox.Sandbox) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.sbs[sb.ID]
	return s != nil && s.Hibernated
}

// Restore brings hibernated sb back.
func (n *Node) Restore(ctx context.Context, sb *sandbox.Sandbox) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("Restore", sb.ID, ""); err != nil {
		return err
	}
	s := n.sbLocked(sb)
	if !s.Hibernated {
		return errdefs.Conflict("sandbox %s is stopped, not hibernated: use start", sb.ID)
	}
	if err := n.startAgent(s); err != nil {
		return err
	}
	s.Status, s.Hibernated = node.StatusRunning, false
	return nil
}

// NormalizeVolume defaults a volume to 1 GiB and one inode per 16 KiB.
func (n *Node) NormalizeVolume(size, inodes int64) (int64, int64, error) {
	if size == 0 {
		size = 1 << 30
	}
	if size < 16<<20 {
		return 0, 0, errdefs.Invalid("volume size must be at least 16 MiB")
	}
	if inodes == 0 {
		inodes = size / (16 << 10)
	}
	return size, inodes, nil
}

// CreateVolume makes volume id (idempotent).
func (n *Node) CreateVolume(id string, size, inodes int64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("CreateVolume", id, ""); err != nil {
		return err
	}
	n.volumes[id] = [2]int64{size, inodes}
	return nil
}

// DeleteVolume removes volume id; a missing one is not an error.
func (n *Node) DeleteVolume(id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("DeleteVolume", id, ""); err != nil {
		return err
	}
	delete(n.volumes, id)
	return nil
}

// VolumeUsage reports nothing used.
func (n *Node) VolumeUsage(id string) (node.VolumeUsage, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.volumes[id]; !ok {
		return node.VolumeUsage{}, errdefs.NotFound("no volume %s", id)
	}
	return node.VolumeUsage{}, nil
}

// VolumeIDs lists the volumes.
func (n *Node) VolumeIDs() ([]string, error) { return n.Volumes(), nil }

// EgressCA returns a fresh CA certificate (no proxy runs here).
func (n *Node) EgressCA(ctx context.Context, sb *sandbox.Sandbox) ([]byte, []byte, error) {
	ca, err := egressproxy.NewCA(sb.ID, time.Now())
	if err != nil {
		return nil, nil, err
	}
	return ca.CertPEM(), nil, nil
}

// Allocate returns documentation-range addresses no sandbox uses.
func (n *Node) Allocate(ctx context.Context, id string, used func(addr string) bool) (string, string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for range 250 {
		n.nextAddr = n.nextAddr%250 + 1
		v4 := fmt.Sprintf("192.0.2.%d", n.nextAddr)
		if !used(v4) {
			return v4, fmt.Sprintf("2001:db8::%x", n.nextAddr), nil
		}
	}
	return "", "", errdefs.Exhausted("memnode: no address left")
}

// SetRules applies sb's rules, or cuts its network.
func (n *Node) SetRules(ctx context.Context, sb *sandbox.Sandbox, cut bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	arg := "apply"
	if cut {
		arg = "cut"
	}
	if err := n.failing("SetRules", sb.ID, arg); err != nil {
		return err
	}
	s := n.sbLocked(sb)
	if cut {
		// A quarantine's cut goes with its freeze.
		if err := n.classCan(s.Class, sb, func(c node.Caps) bool { return c.Freeze }, "cut the network (quarantine)"); err != nil {
			return err
		}
	}
	s.RulesCut = cut
	if !cut {
		s.Rules = slices.Clone(sb.Spec.Allow)
	}
	return nil
}

// Capacity is the pool's size.
func (n *Node) Capacity() (int64, error) { return Capacity, nil }

// Admit admits everything unless an "Admit" failure is injected.
func (n *Node) Admit(need int64, what string, committed func() int64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("Admit", "", what); err != nil {
		return err
	}
	if need > Capacity {
		return errdefs.InsufficientStorage("memnode: %s may grow to %s, more than the node's %s (%s committed)",
			what, sandbox.FormatBytes(need), sandbox.FormatBytes(Capacity), sandbox.FormatBytes(committed()))
	}
	return nil
}

// Committed is nothing: the node's disk is never full.
func (n *Node) Committed(sb *sandbox.Sandbox) int64 { return 0 }

// ReleaseReserve does nothing.
func (n *Node) ReleaseReserve() {}

// DiskUsage reports no cap.
func (n *Node) DiskUsage(sb *sandbox.Sandbox) *node.Disk { return nil }

// Diff lists every file of sb as added.
func (n *Node) Diff(ctx context.Context, sb *sandbox.Sandbox) ([]node.Change, error) {
	n.mu.Lock()
	if err := n.classCan("", sb, func(c node.Caps) bool { return c.RootLayer }, "list a root layer's changes"); err != nil {
		n.mu.Unlock()
		return nil, err
	}
	root := n.sbLocked(sb).Root
	n.mu.Unlock()
	files, err := readTree(root)
	if err != nil {
		return nil, err
	}
	out := make([]node.Change, 0, len(files))
	for p := range files {
		out = append(out, node.Change{Path: p, Kind: "added"})
	}
	slices.SortFunc(out, func(a, b node.Change) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// QuarantineFiles serves reads of sb through its agent from outside: the
// processes may be frozen (or not run at all).
func (n *Node) QuarantineFiles(ctx context.Context, sb *sandbox.Sandbox) (node.FileSource, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("QuarantineFiles", sb.ID, ""); err != nil {
		return nil, err
	}
	if err := n.classCan("", sb, func(c node.Caps) bool { return c.RootLayer }, "read a frozen sandbox's files"); err != nil {
		return nil, err
	}
	s := n.sbLocked(sb)
	if s.agentStop == nil { // a stopped sandbox: serve its files for the reads
		if err := n.startAgent(s); err != nil {
			return nil, err
		}
		return &fileSource{c: agent.NewClientDialer(n.dialer(sb.ID, true)), close: func() {
			n.mu.Lock()
			stop := func() {}
			if s.Status != node.StatusRunning && s.Status != node.StatusPaused {
				stop = stopAgent(s)
			}
			n.mu.Unlock()
			stop()
		}}, nil
	}
	return &fileSource{c: agent.NewClientDialer(n.dialer(sb.ID, true)), close: func() {}}, nil
}

type fileSource struct {
	c     *agent.Client
	close func()
	once  sync.Once
}

func (f *fileSource) Client(ctx context.Context, path string) (*agent.Client, string, error) {
	return f.c, path, nil
}

func (f *fileSource) Close() { f.once.Do(f.close) }

// CommitLayer ends build sandbox sb and keeps its files as a layer that
// sandboxes naming it in their layers are provisioned with.
func (n *Node) CommitLayer(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
	n.mu.Lock()
	if err := n.failing("CommitLayer", sb.ID, ""); err != nil {
		n.mu.Unlock()
		return "", err
	}
	if err := n.classCan("", sb, func(c node.Caps) bool { return c.RootLayer }, "commit a root layer"); err != nil {
		n.mu.Unlock()
		return "", err
	}
	s := n.sbLocked(sb)
	files, err := readTree(s.Root)
	if err != nil {
		n.mu.Unlock()
		return "", err
	}
	n.layerNo++
	id := fmt.Sprintf("memlayer-%d", n.layerNo)
	n.layers[id] = files
	stop := stopAgent(s)
	s.Status = node.StatusStopped
	n.mu.Unlock()
	stop()
	return id, nil
}

// classCan refuses (not supported) what class (sb's when "") cannot do.
// The caller holds n.mu.
func (n *Node) classCan(class string, sb *sandbox.Sandbox, can func(node.Caps) bool, what string) error {
	if class == "" {
		class = sb.Spec.Runtime
	}
	cls, ok := n.classOf(class)
	if !ok {
		return fmt.Errorf("memnode: no runtime class %q", class)
	}
	if !can(cls.Caps) {
		return errdefs.NotSupported("memnode: class %s cannot %s", cls.Name, what)
	}
	return nil
}

// Classes lists the classes, the default first.
func (n *Node) Classes() []node.Class {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.classes)
}

// Isolation names sb's class.
func (n *Node) Isolation(sb *sandbox.Sandbox) node.Isolation {
	n.mu.Lock()
	defer n.mu.Unlock()
	cls, _ := n.classOf(sb.Spec.Runtime)
	return node.Isolation{Runtime: cls.Name, SharedKernel: true, UserNamespace: true, IDMode: sandbox.IDModePerSandbox}
}

// IDRange gives each slot its own range of 65536 ids.
func (n *Node) IDRange(slot int) (sandbox.HostIDs, bool) {
	return sandbox.HostIDs{Slot: slot, Base: uint32(1<<20 + slot*65536), Size: 65536, Mode: sandbox.IDModePerSandbox}, true
}

// AgentRefusals is always 0.
func (n *Node) AgentRefusals() uint64 { return 0 }

// CPUUsage returns what SetCPU set.
func (n *Node) CPUUsage(sb *sandbox.Sandbox) (time.Duration, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cpu[sb.ID], nil
}

// MemoryUsage is always 0: memnode runs nothing.
func (n *Node) MemoryUsage(sb *sandbox.Sandbox) (int64, error) { return 0, nil }

// OOMKills is always 0.
func (n *Node) OOMKills(sb *sandbox.Sandbox) (uint64, error) { return 0, nil }

// Recover records the call.
func (n *Node) Recover(ctx context.Context, live []*sandbox.Sandbox) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.failing("Recover", "", fmt.Sprint(len(live)))
}

// Sweep reports sandboxes and captures no record accounts for.
func (n *Node) Sweep(ctx context.Context, in node.SweepInput, report node.Report) {
	n.mu.Lock()
	var ids []string
	for id := range n.sbs {
		ids = append(ids, id)
	}
	var orphanCaps []string
	for name, c := range n.captures {
		if c.inUse == 0 && !in.Snapshot(name) {
			orphanCaps = append(orphanCaps, name)
		}
	}
	n.mu.Unlock()
	slices.Sort(ids)
	for _, id := range ids {
		// Busy re-reads the record into Live: look again after it.
		if in.Live[id] != nil || in.Busy(id) || in.Live[id] != nil {
			continue
		}
		report("sandbox", id, "host side of a sandbox with no live record", func() error {
			return n.Remove(ctx, &sandbox.Sandbox{ID: id})
		})
	}
	for _, name := range orphanCaps {
		report("capture", name, "capture with no snapshot record", func() error { return n.DropCapture(name) })
	}
}

// Tick does nothing.
func (n *Node) Tick(ctx context.Context, live []*sandbox.Sandbox) {}

// Start keeps the engine's hooks.
func (n *Node) Start(h node.Hooks) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hooks, n.started = h, true
	n.calls = append(n.calls, Call{Method: "Start"})
}

// Close records the call; sandboxes keep running (a daemon stop), so the
// node can be given to a new engine.
func (n *Node) Close(keepNetwork bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed++
	n.calls = append(n.calls, Call{Method: "Close", Arg: fmt.Sprint(keepNetwork)})
}

// readTree reads every file and directory under root, by slash path.
func readTree(root string) (map[string]file, error) {
	out := map[string]file{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == root {
			return filepath.SkipDir
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		f := file{mode: info.Mode().Perm(), dir: d.IsDir()}
		if d.Type().IsRegular() {
			if f.data, err = os.ReadFile(p); err != nil {
				return err
			}
		} else if !d.IsDir() {
			return nil // the agent makes only files and directories here
		}
		out["/"+filepath.ToSlash(rel)] = f
		return nil
	})
	return out, err
}

// writeTree writes files under root.
func writeTree(root string, files map[string]file) error {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths) // parents first
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	for _, p := range paths {
		f, dst := files[p], filepath.Join(root, filepath.FromSlash(p))
		var err error
		if f.dir {
			err = os.MkdirAll(dst, f.mode|0o700)
		} else {
			err = os.WriteFile(dst, f.data, f.mode)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// emptyBut empties dir but for the volumes' paths in it.
func emptyBut(dir string, vols []sandbox.VolumeMount) error {
	keep := map[string]bool{}
	for _, vm := range vols {
		keep[filepath.Join(dir, filepath.FromSlash(vm.Path))] = true
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == dir {
			return filepath.SkipDir
		}
		if err != nil || p == dir {
			return err
		}
		if keep[p] {
			return filepath.SkipDir
		}
		if d.IsDir() && slices.ContainsFunc(slices.Collect(maps.Keys(keep)), func(k string) bool { return strings.HasPrefix(k, p+string(filepath.Separator)) }) {
			return nil // a volume lies below: look inside
		}
		if err := os.RemoveAll(p); err != nil {
			return err
		}
		if d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	})
}

func emptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// The double has every capability; its classes' Caps say which each
// serves.
var (
	_ node.Backend     = (*Node)(nil)
	_ node.Freezer     = (*Node)(nil)
	_ node.Hibernator  = (*Node)(nil)
	_ node.Capturer    = (*Node)(nil)
	_ node.Egress      = (*Node)(nil)
	_ node.EgressProxy = (*Node)(nil)
	_ node.RootLayer   = (*Node)(nil)
	_ node.Renamer     = (*Node)(nil)
)
