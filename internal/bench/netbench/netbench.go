// Package netbench is berth bench's networking measurements, egress and
// nat: create → first exec in network mode egress beside mode none, and TCP
// throughput from an egress sandbox through berth's NAT beside a plain veth
// pair. They run in a private world of three bench-made network namespaces
// (see below) with a second daemon of their own, which Cleanup takes apart;
// the rows go to the bench's report through a harness.Recorder.
package netbench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/bench/harness"
	"github.com/berth-sh/berth/internal/testenv"
)

// Issue 5 measurements: sandbox networking.
const (
	// Egress is the extra create → first exec time of network mode
	// egress over mode none.
	Egress = "egress"
	// NAT is TCP throughput from an egress sandbox to a test host through
	// berth's bridge and NAT, vs the same transfer over a plain veth pair.
	NAT = "nat"
)

// DefaultNetBytes is what each NAT transfer sends.
const DefaultNetBytes = 256 << 20

// natIterations bounds the repetitions of each transfer.
const natIterations = 5

// The network measurements never send a packet off this machine: they run
// a second private daemon inside a network namespace the bench makes
// (nsenter --net, so only its network namespace changes), whose only link
// is a veth into a second bench-made namespace, "the internet", holding
// documentation addresses (198.51.100.0/24) and the TCP sink. The peer's
// sender is a third namespace, joined to "the internet" by a plain veth
// pair (192.0.2.0/24): no bridge, no NAT, no nftables. None of them has a
// link or a route to the real network; all three are deleted at the end.
const (
	netHostAddr = "198.51.100.1/24" // the daemon's uplink
	netSinkAddr = "198.51.100.2"    // "the internet", reached through NAT
	netSrcAddr  = "192.0.2.1/24"    // the peer's sender
	netPeerSink = "192.0.2.2"       // "the internet", over the plain veth
	netSinkPort = 5201
)

// Options are what the network measurements take of the bench's options.
type Options struct {
	// Binary is the berth executable the network daemon runs.
	Binary string
	// WorkDir is the bench's private temporary directory: the network
	// daemon's data dir is made in it and the namespaces are named after it.
	WorkDir string
	// Iterations is the number of samples of each latency; at most
	// natIterations of them for the throughput.
	Iterations int
	// NetBytes is what each transfer of the nat measurement sends.
	NetBytes int64
}

// Bench runs the network measurements of one bench run. Its world is made
// at the first measurement that needs it and removed by Cleanup.
type Bench struct {
	opts Options
	rec  harness.Recorder
	net  *netBench
}

// New returns the network measurements of the bench working in
// opts.WorkDir, reporting to rec. It makes nothing yet.
func New(opts Options, rec harness.Recorder) *Bench {
	return &Bench{opts: opts, rec: rec}
}

// netBench is the network measurements' private world: three namespaces,
// the daemon in one of them and the sink in another.
type netBench struct {
	tag             string // 6 hex, from the work dir
	host, inet, src string // network namespace names
	hostIf, srcIf   string // veth names (the inet ends are derived)
	dir             string // the daemon's data dir
	made            []string
	d               *harness.Daemon
	sink            *sink
	warm            bool
}

// netNames returns the namespace names of the bench working in tmp.
func netNames(tmp string) (tag, host, inet, src string) {
	sum := sha256.Sum256([]byte(tmp))
	tag = hex.EncodeToString(sum[:3])
	return tag, "berth-bench-h-" + tag, "berth-bench-i-" + tag, "berth-bench-s-" + tag
}

// NetNamespaces are the network namespaces a bench working in workDir
// makes (and deletes) for the egress and nat measurements.
func NetNamespaces(workDir string) []string {
	_, h, i, s := netNames(workDir)
	return []string{h, i, s}
}

// DataDir is the network daemon's data dir inside the work dir.
func DataDir(tmp string) string { return filepath.Join(tmp, "netd") }

func netnsPath(name string) string { return testenv.NetnsPath(name) }

func ipRun(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// netSetup makes the namespaces, the sink and the daemon, once.
func (b *Bench) netSetup(ctx context.Context) (*netBench, error) {
	if b.net != nil {
		return b.net, nil
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		return nil, fmt.Errorf("nsenter not found (util-linux): %w", err)
	}
	tag, host, inet, src := netNames(b.opts.WorkDir)
	nb := &netBench{tag: tag, host: host, inet: inet, src: src,
		hostIf: "bbh" + tag, srcIf: "bbs" + tag, dir: DataDir(b.opts.WorkDir)}
	b.net = nb // cleanup removes whatever was made
	for _, ns := range []string{host, inet, src} {
		if err := ipRun("netns", "add", ns); err != nil {
			return nil, err
		}
		nb.made = append(nb.made, ns)
	}
	// Each veth is made with its ends already in their namespaces: it
	// never exists in the bench's own.
	steps := [][]string{
		{"link", "add", nb.hostIf, "netns", host, "type", "veth", "peer", "name", "bbi" + tag, "netns", inet},
		{"link", "add", nb.srcIf, "netns", src, "type", "veth", "peer", "name", "bbt" + tag, "netns", inet},
		{"-n", host, "addr", "add", netHostAddr, "dev", nb.hostIf},
		{"-n", inet, "addr", "add", netSinkAddr + "/24", "dev", "bbi" + tag},
		{"-n", src, "addr", "add", netSrcAddr, "dev", nb.srcIf},
		{"-n", inet, "addr", "add", netPeerSink + "/24", "dev", "bbt" + tag},
	}
	for _, ns := range []string{host, inet, src} {
		steps = append(steps, []string{"-n", ns, "link", "set", "lo", "up"})
	}
	steps = append(steps,
		[]string{"-n", host, "link", "set", nb.hostIf, "up"},
		[]string{"-n", inet, "link", "set", "bbi" + tag, "up"},
		[]string{"-n", inet, "link", "set", "bbt" + tag, "up"},
		[]string{"-n", src, "link", "set", nb.srcIf, "up"})
	for _, s := range steps {
		if err := ipRun(s...); err != nil {
			return nil, err
		}
	}
	var err error
	if nb.sink, err = listenSink(inet, fmt.Sprintf(":%d", netSinkPort)); err != nil {
		return nil, fmt.Errorf("sink in %s: %w", inet, err)
	}
	if err := os.MkdirAll(nb.dir, 0o711); err != nil {
		return nil, err
	}
	if err := os.Chmod(nb.dir, 0o711); err != nil {
		return nil, err
	}
	// Debug and JSON: the "provisioned" lines split each create.
	// No automatic warm pool: its rows compare cold creates with and
	// without egress, and none of its sandboxes may be left at its end.
	nb.d, err = harness.StartDaemon(ctx, b.opts.Binary, nb.dir, host, "--log-level", "debug", "--log-format", "json", "--warm-pool=off")
	if err != nil {
		return nil, fmt.Errorf("network daemon: %w", err)
	}
	b.rec.Logf("network daemon pid %d ready in netns %s (the internet: %s, peer sender: %s)", nb.d.PID(), host, inet, src)
	return nb, nil
}

// Cleanup deletes the network daemon's sandboxes, checks its doctor,
// stops it, closes the sink and deletes the namespaces (which takes the
// bridge, the nftables tables and any veth with them), recording in cl
// what it found. Nothing happens if no measurement made the world.
func (b *Bench) Cleanup(ctx context.Context, cl *harness.Cleanup) {
	nb := b.net
	if nb == nil {
		return
	}
	fail := func(format string, args ...any) {
		cl.Errors = append(cl.Errors, "network: "+fmt.Sprintf(format, args...))
	}
	if nb.d != nil {
		c := nb.d.C
		if sbs, err := c.ListSandboxes(ctx, false); err != nil {
			fail("listing sandboxes: %v", err)
		} else {
			for _, sb := range sbs {
				if _, err := c.DeleteSandbox(ctx, sb.ID, true); err != nil {
					fail("deleting %s: %v", sb.ID, err)
				}
			}
		}
		if rep, err := c.Doctor(ctx, false); err != nil {
			fail("doctor: %v", err)
		} else {
			for _, f := range rep.Findings {
				cl.DoctorFindings = append(cl.DoctorFindings, fmt.Sprintf("network daemon: %s %s: %s", f.Kind, f.ID, f.Detail))
			}
		}
		if err := nb.d.Stop(); err != nil {
			fail("stopping the daemon: %v", err)
		}
	}
	// What the network daemon left, its namespace still there to look in
	// (its veths, bridge and nft tables, besides mounts and cgroups).
	scope := testenv.Scope{DataDir: nb.dir, Netns: nb.host}
	if nb.d != nil {
		scope.PGID = nb.d.PID()
	}
	leaks, err := testenv.Clean(scope)
	for _, l := range leaks {
		cl.Leftover = append(cl.Leftover, "network daemon: "+l.String())
	}
	if err != nil {
		fail("%v", err)
	}
	if nb.sink != nil {
		nb.sink.close()
	}
	for _, ns := range nb.made {
		if err := ipRun("netns", "del", ns); err != nil {
			fail("%v", err)
		}
	}
	for _, l := range testenv.Check(testenv.Scope{DataDir: nb.dir, Namespaces: nb.made}) {
		if l.Kind == "netns" {
			fail("%s still there", l)
		}
	}
	b.net = nil
}

// sink is a TCP listener in a namespace that counts each connection's
// bytes and answers the count when the sender shuts its side down.
type sink struct {
	ln net.Listener
	wg sync.WaitGroup
	mu sync.Mutex
	// from is the source address of the last connection counted.
	from string
}

func (s *sink) lastFrom() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.from
}

// listenSink listens on addr in network namespace ns. The socket belongs
// to the namespace it was made in: it is made on a locked thread moved
// there, and the thread exits with its goroutine (it is never unlocked,
// so no other goroutine runs in that namespace).
func listenSink(ns, addr string) (*sink, error) {
	type res struct {
		ln  net.Listener
		err error
	}
	ch := make(chan res, 1)
	go func() {
		goruntime.LockOSThread()
		f, err := os.Open(netnsPath(ns))
		if err != nil {
			ch <- res{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- res{err: fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		ln, err := net.Listen("tcp", addr)
		ch <- res{ln, err}
	}()
	r := <-ch
	if r.err != nil {
		return nil, r.err
	}
	s := &sink{ln: r.ln}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

func (s *sink) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			buf := make([]byte, 1<<20)
			var n int64
			for {
				k, err := c.Read(buf)
				n += int64(k)
				if err != nil {
					break
				}
			}
			if host, _, err := net.SplitHostPort(c.RemoteAddr().String()); err == nil {
				s.mu.Lock()
				s.from = host
				s.mu.Unlock()
			}
			fmt.Fprintf(c, "%d\n", n)
		}()
	}
}

func (s *sink) close() {
	s.ln.Close()
	s.wg.Wait()
}

// natSender sends argv[3] zero bytes to argv[1]:argv[2] in 1 MiB writes,
// shuts its side down and waits for the sink's count; it prints the
// seconds from the first byte to the count, and the count. The same
// script runs in the sandbox and in the peer's namespace.
const natSender = `import socket, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
buf = memoryview(bytearray(1 << 20))
s = socket.create_connection((host, port), timeout=120)
t0 = time.perf_counter()
left = n
while left > 0:
    k = min(left, len(buf))
    s.sendall(buf[:k])
    left -= k
s.shutdown(socket.SHUT_WR)
got = s.makefile().readline().strip()
print("%.6f %s" % (time.perf_counter() - t0, got))
`

const python = "/usr/bin/python3"

// parseSend reads natSender's output and returns MiB/s.
func parseSend(out string, n int64) (float64, error) {
	f := strings.Fields(out)
	if len(f) != 2 {
		return 0, fmt.Errorf("sender printed %q", out)
	}
	secs, err := strconv.ParseFloat(f[0], 64)
	if err != nil || secs <= 0 {
		return 0, fmt.Errorf("sender printed %q", out)
	}
	if got, err := strconv.ParseInt(f[1], 10, 64); err != nil || got != n {
		return 0, fmt.Errorf("the sink counted %s bytes, not %d", f[1], n)
	}
	return harness.MiB(float64(n)) / secs, nil
}

// provisioned is a daemon "provisioned" log line: the runtime's start
// (runc create/start and, in mode egress, network.Attach) and the wait for
// the agent.
type provisioned struct {
	Msg          string `json:"msg"`
	Sandbox      string `json:"sandbox"`
	RuntimeStart int64  `json:"runtime_start"` // ns
	AgentReady   int64  `json:"agent_ready"`   // ns
}

// provisionedLines reads the daemon log's provisioned lines by sandbox.
func provisionedLines(d *harness.Daemon) map[string]provisioned {
	out := map[string]provisioned{}
	f, err := os.Open(d.LogPath)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte(`"provisioned"`)) {
			continue
		}
		var p provisioned
		if json.Unmarshal(line, &p) == nil && p.Msg == "provisioned" && p.Sandbox != "" {
			out[p.Sandbox] = p
		}
	}
	return out
}

// netCycle is one create → first exec of true in the network daemon.
type netCycle struct {
	id                string
	tti, create, exec time.Duration
}

func (nb *netBench) cycle(ctx context.Context, mode string) (netCycle, error) {
	return nb.cycleOn(ctx, "", mode)
}

// cycleOn is cycle on runtime class rt ("": the default).
func (nb *netBench) cycleOn(ctx context.Context, rt, mode string) (netCycle, error) {
	c := nb.d.C
	t0 := time.Now()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Network: mode, Runtime: rt})
	if err != nil {
		return netCycle{}, fmt.Errorf("create (network %s, class %q): %w", mode, rt, err)
	}
	r := netCycle{id: sb.ID, create: time.Since(t0)}
	r.exec, err = harness.ExecTrue(ctx, c, sb.ID)
	r.tti = time.Since(t0)
	if _, derr := c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID, true); err == nil && derr != nil {
		err = fmt.Errorf("delete %s: %w", sb.ID, derr)
	}
	return r, err
}

// warmUp pays the network's first-use costs (bridge, nftables tables,
// resolver) and the daemon's first creates, untimed.
func (nb *netBench) warmUp(ctx context.Context) error {
	if nb.warm {
		return nil
	}
	for range 2 {
		for _, mode := range []string{"egress", "none"} {
			if _, err := nb.cycle(ctx, mode); err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
		}
	}
	nb.warm = true
	return nil
}

// MeasureEgress is (m): the extra create → first exec time of network
// mode egress over none.
func (b *Bench) MeasureEgress(ctx context.Context) error {
	nb, err := b.netSetup(ctx)
	if err != nil {
		return err
	}
	if err := nb.warmUp(ctx); err != nil {
		return err
	}
	n := b.opts.Iterations
	var eg, no []netCycle
	var diff harness.Samples
	for i := range n {
		// Alternate which mode goes first.
		modes := []string{"egress", "none"}
		if i%2 == 1 {
			modes = []string{"none", "egress"}
		}
		var pair [2]netCycle
		for _, mode := range modes {
			r, err := nb.cycle(ctx, mode)
			if err != nil {
				return err
			}
			if mode == "egress" {
				pair[0] = r
			} else {
				pair[1] = r
			}
		}
		eg, no = append(eg, pair[0]), append(no, pair[1])
		diff.Add(pair[0].tti - pair[1].tti)
		b.rec.Every(i, n, "egress vs none create → first exec")
	}
	pick := func(rs []netCycle, f func(netCycle) time.Duration) harness.Stat {
		var s harness.Samples
		for _, r := range rs {
			s.Add(f(r))
		}
		return harness.Summarize(s.V)
	}
	prov := provisionedLines(nb.d)
	fromLog := func(rs []netCycle, f func(provisioned) int64) (harness.Stat, int) {
		var v []float64
		for _, r := range rs {
			if p, ok := prov[r.id]; ok {
				v = append(v, float64(f(p))/1e6)
			}
		}
		return harness.Summarize(v), len(v)
	}
	egTTI, noTTI := pick(eg, func(r netCycle) time.Duration { return r.tti }), pick(no, func(r netCycle) time.Duration { return r.tti })
	extra := harness.Summarize(diff.V)
	p50Diff := egTTI.P50 - noTTI.P50
	b.rec.Add(harness.Row{Measurement: Egress, Name: "create → first exec, network egress", Unit: "ms", Berth: egTTI,
		Peer: "the same, network none", PeerStat: &noTTI,
		Note: "daemon in a bench-made netns; egress sandboxes without allow rules, one at a time, the two modes alternating"})
	row := harness.Row{Measurement: Egress, Name: "  extra time of egress over none (paired)", Unit: "ms", Berth: extra,
		Target: "p50 ≤ 15 ms",
		Note:   fmt.Sprintf("p50 of the per-pair differences; p50(egress) − p50(none) = %.2f ms; both must be ≤ 15 ms", p50Diff)}
	row.Pass = harness.Pass(extra.P50 <= 15 && p50Diff <= 15)
	b.rec.Add(row)
	egC, noC := pick(eg, func(r netCycle) time.Duration { return r.create }), pick(no, func(r netCycle) time.Duration { return r.create })
	b.rec.Add(harness.Row{Measurement: Egress, Name: "  of which: create call", Unit: "ms", Berth: egC, Peer: "network none", PeerStat: &noC})
	egRS, k1 := fromLog(eg, func(p provisioned) int64 { return p.RuntimeStart })
	noRS, k2 := fromLog(no, func(p provisioned) int64 { return p.RuntimeStart })
	if k1 > 0 && k2 > 0 {
		b.rec.Add(harness.Row{Measurement: Egress, Name: "    runtime start (+ network.Attach in egress)", Unit: "ms", Berth: egRS,
			Peer: "network none (no attach)", PeerStat: &noRS,
			Note: "the daemon's own split (debug log \"provisioned\": runtime_start spans runc start and attachNetwork)"})
		egAR, _ := fromLog(eg, func(p provisioned) int64 { return p.AgentReady })
		noAR, _ := fromLog(no, func(p provisioned) int64 { return p.AgentReady })
		b.rec.Add(harness.Row{Measurement: Egress, Name: "    agent ready", Unit: "ms", Berth: egAR, Peer: "network none", PeerStat: &noAR})
	}
	egE, noE := pick(eg, func(r netCycle) time.Duration { return r.exec }), pick(no, func(r netCycle) time.Duration { return r.exec })
	b.rec.Add(harness.Row{Measurement: Egress, Name: "  of which: first exec", Unit: "ms", Berth: egE, Peer: "network none", PeerStat: &noE})
	return b.measureEgressRunsc(ctx, nb, egTTI)
}

// measureEgressRunsc adds the gVisor class's egress create → first exec
// beside its mode none and runc's egress (egRunc), when the daemon offers
// runsc: its namespace is made and wired before runsc create.
func (b *Bench) measureEgressRunsc(ctx context.Context, nb *netBench, egRunc harness.Stat) error {
	rep, err := nb.d.C.Doctor(ctx, false)
	if err != nil {
		return err
	}
	if !strings.Contains(rep.Runtime, "runsc") {
		b.rec.Add(harness.Row{Measurement: Egress, Name: "create → first exec, runsc network egress", Unit: "ms",
			Note: "skipped: the daemon offers no runsc class (scripts/install-runsc.sh; see the daemon log)"})
		return nil
	}
	for _, mode := range []string{"egress", "none"} { // warm-up
		if _, err := nb.cycleOn(ctx, "runsc", mode); err != nil {
			return fmt.Errorf("runsc warm-up: %w", err)
		}
	}
	n := min(b.opts.Iterations, 20)
	var eg, no harness.Samples
	for i := range n {
		for _, mode := range []string{"egress", "none"} {
			r, err := nb.cycleOn(ctx, "runsc", mode)
			if err != nil {
				return err
			}
			if mode == "egress" {
				eg.Add(r.tti)
			} else {
				no.Add(r.tti)
			}
		}
		b.rec.Every(i, n, "runsc egress vs none create → first exec")
	}
	egS, noS := harness.Summarize(eg.V), harness.Summarize(no.V)
	b.rec.Add(harness.Row{Measurement: Egress, Name: "create → first exec, runsc network egress", Unit: "ms", Berth: egS,
		Peer: "the same, runsc network none", PeerStat: &noS,
		Note: "gVisor's netstack on a netns wired before runsc create; the two modes alternate"})
	b.rec.Add(harness.Row{Measurement: Egress, Name: "  runsc network egress vs runc network egress", Unit: "ms", Berth: egS,
		Peer: "runc, network egress (above)", PeerStat: &egRunc})
	return nil
}

// MeasureNAT is (n): TCP throughput from an egress sandbox through the
// NAT to a host in "the internet", vs the same transfer over a plain veth
// pair.
func (b *Bench) MeasureNAT(ctx context.Context) error {
	nb, err := b.netSetup(ctx)
	if err != nil {
		return err
	}
	if err := nb.warmUp(ctx); err != nil {
		return err
	}
	c := nb.d.C
	size := b.opts.NetBytes
	cpus := float64(goruntime.NumCPU())
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Network: "egress",
		Allow:     []string{fmt.Sprintf("tcp://%s:%d", netSinkAddr, netSinkPort)},
		Resources: api.Resources{CPUs: cpus}})
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	defer c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID, true)
	n := strconv.FormatInt(size, 10)
	port := strconv.Itoa(netSinkPort)
	viaNAT := func() (float64, error) {
		var out, errb strings.Builder
		exit, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{python, "-c", natSender, netSinkAddr, port, n}}, &out, &errb)
		if err != nil {
			return 0, fmt.Errorf("exec: %w", err)
		}
		if exit.Code != 0 {
			return 0, fmt.Errorf("sender in the sandbox exited %d: %s", exit.Code, strings.TrimSpace(errb.String()))
		}
		v, err := parseSend(out.String(), size)
		// The sink saw the daemon's uplink address: masqueraded.
		if from, want := nb.sink.lastFrom(), strings.TrimSuffix(netHostAddr, "/24"); err == nil && from != want {
			err = fmt.Errorf("the sink saw the transfer from %s, not from the NAT address %s", from, want)
		}
		return v, err
	}
	viaVeth := func() (float64, error) {
		cmd := exec.CommandContext(ctx, "nsenter", "--net="+netnsPath(nb.src), "--", python, "-c", natSender, netPeerSink, port, n)
		var errb strings.Builder
		cmd.Stderr = &errb
		out, err := cmd.Output()
		if err != nil {
			return 0, fmt.Errorf("sender in %s: %w: %s", nb.src, err, strings.TrimSpace(errb.String()))
		}
		v, err := parseSend(string(out), size)
		if from, want := nb.sink.lastFrom(), strings.TrimSuffix(netSrcAddr, "/24"); err == nil && from != want {
			err = fmt.Errorf("the sink saw the transfer from %s, not from %s", from, want)
		}
		return v, err
	}
	// Warm-up, untimed: a first transfer each way.
	if _, err := viaNAT(); err != nil {
		return err
	}
	if _, err := viaVeth(); err != nil {
		return err
	}
	reps := min(b.opts.Iterations, natIterations)
	var ns, ps []float64
	for i := range reps {
		v, err := viaNAT()
		if err != nil {
			return err
		}
		ns = append(ns, v)
		if v, err = viaVeth(); err != nil {
			return err
		}
		ps = append(ps, v)
		b.rec.Every(i, reps, "NAT throughput")
	}
	// Higher is better: p95 of a throughput is its 5th percentile.
	b.rec.Add(harness.Row{Measurement: NAT, Name: fmt.Sprintf("TCP throughput, sandbox → test host through NAT (%s)", harness.SizeLabel(size)),
		Unit: "MiB/s", Berth: *lowTail(ns), Peer: "same transfer over a plain veth pair", PeerStat: lowTail(ps),
		Note: fmt.Sprintf("python3 sender (1 MiB sendall) in an egress sandbox (cpus %g, one allow rule) → Go sink in a bench-made netns; "+
			"path sandbox veth → bridge → nftables forward + masquerade → veth; peer: the same sender in a plain netns, one veth, no nftables; "+
			"the sink saw the NAT transfers from %s (masqueraded); the p95 column is the slow tail (5th percentile)", cpus, strings.TrimSuffix(netHostAddr, "/24"))})
	return nil
}

// lowTail summarises throughputs: its P95 is the 5th percentile, the
// slow tail of a higher-is-better figure.
func lowTail(v []float64) *harness.Stat {
	s := harness.Summarize(v)
	sorted := slices.Clone(v)
	slices.Sort(sorted)
	s.P95 = harness.Percentile(sorted, 0.05)
	return &s
}
