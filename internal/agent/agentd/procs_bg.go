package agentd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Background processes: started by one connection, they outlive it. The
// table holds at most wire.MaxProcs running (or restarting) processes and
// the last wire.MaxProcExits ended ones (oldest dropped first); each keeps
// its last wire.ProcRingBytes of output, stdout and stderr chunks with
// their stream, in a ring that attachers read at their own pace. Output is
// read from the process as fast as it comes and appended to the ring, so a
// slow attacher never blocks the process: it is told of the bytes it
// missed with a gap frame.
//
// A supervised process (restart always or on-failure) is started again
// after it ends, with a backoff that doubles from restartBackoffMin up to
// restartBackoffMax, at most MaxRestarts times; a signal with stop ends the
// supervision.
const (
	restartBackoffMin   = 250 * time.Millisecond
	restartBackoffMax   = 30 * time.Second
	defaultMaxRestarts  = 10
	restartResetRunTime = 10 * time.Second // a run this long resets the backoff
)

var tagRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]*$`)

type bgTable struct {
	boot string

	mu     sync.Mutex
	next   int
	procs  map[string]*bgProc // by id
	ended  []string           // ids of ended processes, oldest first
	closed bool
	quit   chan struct{} // closed at shutdown: runners kill their process
}

func newBgTable() *bgTable {
	b := make([]byte, 8)
	rand.Read(b)
	return &bgTable{boot: hex.EncodeToString(b), procs: map[string]*bgProc{}, quit: make(chan struct{})}
}

// bgProc is one background process, over all its runs.
type bgProc struct {
	id, tag     string
	spec        wire.ExecSpec
	restart     string
	maxRestarts int
	started     time.Time

	mu       sync.Mutex
	state    string
	pid      int
	eio      *execIO // of the current run; nil between runs
	exit     *wire.Exit
	restarts int
	stop     bool // no restart
	final    bool // ended for good, its output read to the end
	ring     ring
	changed  chan struct{} // closed and replaced on every change
	done     chan struct{} // closed when final
	wake     chan struct{} // cuts a restart backoff short (stop)
}

// notifyLocked wakes every attacher and waiter.
func (p *bgProc) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *bgProc) info() wire.ProcInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	argv := p.spec.Argv
	if len(argv) > wire.ProcInfoArgs {
		argv = argv[:wire.ProcInfoArgs]
	}
	cut := make([]string, len(argv))
	for i, a := range argv {
		if len(a) > wire.ProcInfoArg {
			a = a[:wire.ProcInfoArg]
		}
		cut[i] = a
	}
	in := wire.ProcInfo{ID: p.id, Tag: p.tag, Argv: cut, TTY: p.spec.TTY, Started: p.started,
		State: p.state, Restart: p.restart, Restarts: p.restarts}
	if p.state == wire.ProcRunning {
		in.PID = p.pid
	}
	if p.exit != nil {
		ex := *p.exit
		in.Exit = &ex
	}
	return in
}

// ring keeps the last cap bytes of output as chunks; off counts every
// byte ever appended, so a reader's cursor tells what it missed.
type ring struct {
	chunks []chunk
	bytes  int
	end    int64 // offset after the last byte appended
	cap    int
}

type chunk struct {
	t    wire.FrameType
	off  int64
	data []byte
}

func (r *ring) add(t wire.FrameType, p []byte) {
	if len(p) == 0 {
		return
	}
	limit := r.cap
	if limit <= 0 {
		limit = wire.ProcRingBytes
	}
	if len(p) > limit {
		r.end += int64(len(p) - limit)
		p = p[len(p)-limit:]
	}
	r.chunks = append(r.chunks, chunk{t: t, off: r.end, data: append([]byte(nil), p...)})
	r.bytes += len(p)
	r.end += int64(len(p))
	for r.bytes > limit {
		r.bytes -= len(r.chunks[0].data)
		r.chunks[0] = chunk{}
		r.chunks = r.chunks[1:]
	}
}

// since returns the chunks at or after cursor and how many bytes before
// the first of them were dropped from the ring; next is the new cursor.
// The chunks' data is never changed after add, so it is safe to use
// after the lock is released.
func (r *ring) since(cursor int64) (out []chunk, skipped, next int64) {
	if cursor >= r.end {
		return nil, 0, r.end
	}
	i := 0
	for i < len(r.chunks) && r.chunks[i].off < cursor {
		i++
	}
	out = append([]chunk(nil), r.chunks[i:]...)
	first := r.end
	if len(out) > 0 {
		first = out[0].off
	}
	if first > cursor {
		skipped = first - cursor
	}
	return out, skipped, r.end
}

// find returns the process named by ref: an id, or a tag (the running
// process with it, else the most recently started one).
func (b *bgTable) find(ref string) (*bgProc, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.procs[ref]; p != nil {
		return p, nil
	}
	var best *bgProc
	for _, p := range b.procs {
		if p.tag != ref {
			continue
		}
		p.mu.Lock()
		final := p.final
		p.mu.Unlock()
		if !final {
			return p, nil
		}
		if best == nil || p.started.After(best.started) {
			best = p
		}
	}
	if best == nil {
		return nil, errdefs.NotFound("no process %q", ref)
	}
	return best, nil
}

func (b *bgTable) list() []*bgProc {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*bgProc, 0, len(b.procs))
	for _, p := range b.procs {
		out = append(out, p)
	}
	// by id: ids are increasing numbers
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && idLess(out[j].id, out[j-1].id); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func idLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// retire moves p to the ended list, dropping the oldest ended processes
// beyond wire.MaxProcExits.
func (b *bgTable) retire(p *bgProc) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ended = append(b.ended, p.id)
	for len(b.ended) > wire.MaxProcExits {
		delete(b.procs, b.ended[0])
		b.ended = b.ended[1:]
	}
}

// handleProcStart starts a background process and answers with its info.
// A command that cannot be found or executed still makes a process: it
// ends at once with exit 127 or 126 and the reason in its output.
func (s *server) handleProcStart(cn *conn) error {
	spec := cn.req.Exec
	pr := cn.req.Proc
	if pr == nil {
		pr = &wire.ProcRequest{}
	}
	if spec == nil || len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return errdefs.Invalid("exec: empty argv")
	}
	if spec.TimeoutMS != 0 {
		return errdefs.Invalid("a background process has no timeout; signal it")
	}
	if pr.Tag != "" && (len(pr.Tag) > wire.MaxTagBytes || !tagRE.MatchString(pr.Tag)) {
		return errdefs.Invalid("tag must be a letter then letters, digits, '_', '.' or '-', at most %d bytes", wire.MaxTagBytes)
	}
	switch pr.Restart {
	case "", wire.RestartNever, wire.RestartAlways, wire.RestartOnFailure:
	default:
		return errdefs.Invalid("restart policy %q: want never, always or on-failure", pr.Restart)
	}
	if pr.MaxRestarts < 0 || pr.MaxRestarts > wire.MaxRestarts {
		return errdefs.Invalid("max_restarts must be 0..%d", wire.MaxRestarts)
	}
	restart := pr.Restart
	if restart == "" {
		restart = wire.RestartNever
	}
	maxRestarts := pr.MaxRestarts
	if maxRestarts == 0 {
		maxRestarts = defaultMaxRestarts
	}
	b := s.bg
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return errdefs.Conflict("the agent is shutting down")
	}
	live := 0
	for _, q := range b.procs {
		q.mu.Lock()
		if !q.final {
			live++
			if pr.Tag != "" && q.tag == pr.Tag {
				q.mu.Unlock()
				b.mu.Unlock()
				return errdefs.Conflict("a process tagged %q is running (id %s)", pr.Tag, q.id)
			}
		}
		q.mu.Unlock()
	}
	if live >= wire.MaxProcs {
		b.mu.Unlock()
		return errdefs.Exhausted("%d background processes are running, the most a sandbox may have", live)
	}
	b.next++
	p := &bgProc{id: strconv.Itoa(b.next), tag: pr.Tag, spec: *spec, restart: restart, maxRestarts: maxRestarts,
		started: time.Now().UTC(), state: wire.ProcRunning,
		changed: make(chan struct{}), done: make(chan struct{}), wake: make(chan struct{}, 1)}
	p.spec.Argv = append([]string(nil), spec.Argv...)
	p.spec.Env = append([]string(nil), spec.Env...)
	// The first run starts under the table's lock, so that a shutdown
	// either sees it or refuses it.
	first := s.bgSpawn(p)
	var ce *commandError
	if first.err != nil && !errors.As(first.err, &ce) {
		b.next--
		b.mu.Unlock()
		return first.err
	}
	b.procs[p.id] = p
	b.mu.Unlock()

	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.bgRun(p, first)
	}()
	return cn.fw.SendJSON(wire.FrameResult, p.info())
}

// bgRunState is one run's process, or the reason it could not start.
type bgRunState struct {
	eio  *execIO
	pid  int
	done <-chan unix.WaitStatus
	err  error
}

func (s *server) bgSpawn(p *bgProc) bgRunState {
	spec := p.spec
	eio, pid, done, err := s.spawn(&spec)
	if err == nil {
		p.mu.Lock()
		p.eio, p.pid = eio, pid
		p.mu.Unlock()
	}
	return bgRunState{eio: eio, pid: pid, done: done, err: err}
}

// bgRun supervises p: each run's output goes to the ring, its exit is
// recorded, and the restart policy decides whether another run follows.
func (s *server) bgRun(p *bgProc, run bgRunState) {
	backoff := restartBackoffMin
	for {
		begin := time.Now()
		exit := s.bgOnce(p, run)
		p.mu.Lock()
		p.exit = &exit
		p.eio, p.pid = nil, 0
		again := !p.stop && p.restarts < p.maxRestarts && (p.restart == wire.RestartAlways ||
			(p.restart == wire.RestartOnFailure && exit.Code != 0))
		select {
		case <-s.bg.quit:
			again = false
		default:
		}
		if !again {
			p.state = wire.ProcExited
			if exit.Signal != "" {
				p.state = wire.ProcKilled
			}
			p.final = true
			p.notifyLocked()
			close(p.done)
			p.mu.Unlock()
			s.bg.retire(p)
			return
		}
		p.state = wire.ProcRestarting
		p.notifyLocked()
		p.mu.Unlock()
		if time.Since(begin) >= restartResetRunTime {
			backoff = restartBackoffMin
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-p.wake:
		case <-s.bg.quit:
		}
		t.Stop()
		backoff = min(2*backoff, restartBackoffMax)
		s.bg.mu.Lock()
		p.mu.Lock()
		if s.bg.closed || p.stop {
			// Ended during the backoff: the last exit stands.
			p.state = wire.ProcExited
			if p.exit.Signal != "" {
				p.state = wire.ProcKilled
			}
			p.final = true
			p.notifyLocked()
			close(p.done)
			p.mu.Unlock()
			s.bg.mu.Unlock()
			s.bg.retire(p)
			return
		}
		p.restarts++
		p.state = wire.ProcRunning
		p.mu.Unlock()
		run = s.bgSpawn(p)
		s.bg.mu.Unlock()
		p.mu.Lock()
		p.ring.add(wire.FrameStderr, []byte("berth: restarted ("+strconv.Itoa(p.restarts)+")\n"))
		p.notifyLocked()
		p.mu.Unlock()
	}
}

// bgOnce runs one process to its end and reads its output into the ring.
func (s *server) bgOnce(p *bgProc, run bgRunState) wire.Exit {
	if run.err != nil {
		code, ok := commandExit(run.err)
		if !ok {
			code = 126
		}
		msg := run.err.Error()
		var de *errdefs.Error
		if errors.As(run.err, &de) {
			msg = de.Msg
		}
		t := wire.FrameStderr
		if p.spec.TTY {
			t = wire.FrameStdout
		}
		p.mu.Lock()
		p.ring.add(t, []byte("berth: "+msg+"\n"))
		p.mu.Unlock()
		return wire.Exit{Code: code}
	}
	eio, pid := run.eio, run.pid
	defer eio.closeParent()
	begin := time.Now()
	p.mu.Lock()
	p.eio, p.pid = eio, pid
	p.notifyLocked()
	p.mu.Unlock()

	var exitedAt atomic.Int64
	var copiers sync.WaitGroup
	outs := eio.outputs()
	cut := make([]bool, len(outs))
	for i, o := range outs {
		copiers.Add(1)
		go func() {
			defer copiers.Done()
			cut[i] = copyToRing(o.f, o.t, p, &exitedAt)
		}()
	}
	var ws unix.WaitStatus
	select {
	case ws = <-run.done:
	case <-s.bg.quit:
		unix.Kill(-pid, unix.SIGKILL)
		ws = <-run.done
	}
	dur := time.Since(begin)
	now := time.Now()
	exitedAt.Store(now.UnixNano())
	for _, o := range outs {
		o.f.SetReadDeadline(now.Add(outputGrace))
	}
	copiers.Wait()
	eio.stopInput()
	for i, o := range outs {
		if cut[i] {
			eio.forget(o.f)
			s.drain(o.f)
		}
	}
	exit := wire.Exit{DurationMS: float64(dur.Microseconds()) / 1000}
	if ws.Signaled() {
		exit.Code = 128 + int(ws.Signal())
		exit.Signal = unix.SignalName(ws.Signal())
	} else {
		exit.Code = ws.ExitStatus()
	}
	return exit
}

// copyToRing is copyOutput for a background process: into its ring, never
// blocking on anyone.
func copyToRing(f *os.File, t wire.FrameType, p *bgProc, exitedAt *atomic.Int64) (cut bool) {
	buf := make([]byte, wire.DataChunk)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			p.mu.Lock()
			p.ring.add(t, buf[:n])
			p.notifyLocked()
			p.mu.Unlock()
		}
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				return false
			}
			ex := exitedAt.Load()
			if pending(f) > 0 && time.Since(time.Unix(0, ex)) < 5*outputLinger {
				f.SetReadDeadline(time.Now().Add(outputGrace))
				continue
			}
			return true
		}
		if ex := exitedAt.Load(); ex != 0 {
			d := time.Now().Add(outputGrace)
			if limit := time.Unix(0, ex).Add(outputLinger); d.After(limit) {
				d = limit
			}
			f.SetReadDeadline(d)
		}
	}
}

func (s *server) procRef(cn *conn) (*bgProc, error) {
	if cn.req.Proc == nil || cn.req.Proc.ID == "" {
		return nil, errdefs.Invalid("no process id or tag")
	}
	return s.bg.find(cn.req.Proc.ID)
}

func (s *server) handleProcList(cn *conn) error {
	ps := s.bg.list()
	if err := cn.fw.Write(wire.FrameResult, mustJSON(wire.ProcListHead{Boot: s.bg.boot, Count: len(ps)})); err != nil {
		return err
	}
	for _, p := range ps {
		if err := cn.fw.Write(wire.FrameResult, mustJSON(p.info())); err != nil {
			return err
		}
	}
	return cn.fw.Send(wire.FrameEnd, nil)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// handleProcAttach replays p's ring and, with follow, streams its output
// live until it ends; then the exit frame. Without follow the replay ends
// with exit if p has ended, else with end. While attached the client may
// send stdin, stdin-eof, resize and signal frames; its leaving does not
// touch the process.
func (s *server) handleProcAttach(ctx context.Context, cn *conn) error {
	p, err := s.procRef(cn)
	if err != nil {
		return err
	}
	follow := cn.req.Proc.Follow
	gone := make(chan error, 1)
	go func() { gone <- procInput(cn.fr, p) }()
	defer func() {
		cn.c.SetReadDeadline(time.Now())
		<-gone
	}()
	var cursor int64
	for {
		p.mu.Lock()
		chunks, skipped, next := p.ring.since(cursor)
		changed, final := p.changed, p.final
		var exit wire.Exit
		if p.exit != nil {
			exit = *p.exit
		}
		p.mu.Unlock()
		cursor = next
		if skipped > 0 {
			if err := cn.fw.Write(wire.FrameGap, mustJSON(wire.Gap{Skipped: skipped})); err != nil {
				return err
			}
		}
		for _, c := range chunks {
			if err := cn.fw.Write(c.t, c.data); err != nil {
				return err
			}
		}
		if len(chunks) > 0 || skipped > 0 {
			if err := cn.fw.Flush(); err != nil {
				return err
			}
			continue // more may have come while sending
		}
		if final {
			return cn.fw.SendJSON(wire.FrameExit, exit)
		}
		if !follow {
			return cn.fw.Send(wire.FrameEnd, nil)
		}
		select {
		case <-changed:
		case <-gone:
			gone <- nil
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// procInput applies an attacher's frames to the current run of p until
// the connection ends.
func procInput(fr *wire.FrameReader, p *bgProc) error {
	for {
		t, payload, err := fr.Next()
		if err != nil {
			return err
		}
		p.mu.Lock()
		eio, pid := p.eio, p.pid
		p.mu.Unlock()
		switch t {
		case wire.FrameStdin:
			if eio != nil {
				eio.writeStdin(payload)
			}
		case wire.FrameStdinEOF:
			if eio != nil && !eio.tty {
				eio.closeStdin()
			}
		case wire.FrameResize:
			var rs wire.Resize
			if json.Unmarshal(payload, &rs) == nil && rs.Rows != 0 && rs.Cols != 0 && eio != nil && eio.tty {
				setWinsize(eio.ptmx, rs.Rows, rs.Cols)
			}
		case wire.FrameSignal:
			var sm wire.SignalMsg
			if json.Unmarshal(payload, &sm) == nil && pid > 0 {
				if sig := parseSignal(sm.Signal); sig != 0 {
					unix.Kill(-pid, sig)
				}
			}
		default:
			return wire.ProtocolErrorf("unexpected %s frame while attached", t)
		}
	}
}

// handleProcStdin copies stdin frames to p; stdin-eof closes its stdin,
// end leaves it open. It answers end.
func (s *server) handleProcStdin(cn *conn) error {
	p, err := s.procRef(cn)
	if err != nil {
		return err
	}
	p.mu.Lock()
	eio := p.eio
	p.mu.Unlock()
	if eio == nil {
		return errdefs.Conflict("process %s is not running", p.id)
	}
	for {
		t, payload, err := cn.fr.Next()
		if err != nil {
			return err
		}
		switch t {
		case wire.FrameStdin:
			eio.writeStdin(payload)
		case wire.FrameStdinEOF:
			if !eio.tty {
				eio.closeStdin()
			}
			return cn.fw.Send(wire.FrameEnd, nil)
		case wire.FrameEnd:
			return cn.fw.Send(wire.FrameEnd, nil)
		default:
			return wire.ProtocolErrorf("unexpected %s frame in proc_stdin", t)
		}
	}
}

// handleProcSignal signals p's process group; with stop, p is not
// restarted after it (and one waiting out a backoff ends now).
func (s *server) handleProcSignal(cn *conn) error {
	p, err := s.procRef(cn)
	if err != nil {
		return err
	}
	name := cn.req.Proc.Signal
	if name == "" {
		name = "SIGTERM"
	}
	sig := parseSignal(name)
	if sig == 0 {
		return errdefs.Invalid("unknown signal %q", name)
	}
	p.mu.Lock()
	if p.final {
		p.mu.Unlock()
		return errdefs.Conflict("process %s has ended", p.id)
	}
	if cn.req.Proc.Stop {
		p.stop = true
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
	pid := p.pid
	p.mu.Unlock()
	if pid > 0 {
		unix.Kill(-pid, sig)
	}
	return cn.fw.Send(wire.FrameEnd, nil)
}

// handleProcWait answers p's exit once it has ended for good, or nothing
// if the client leaves first.
func (s *server) handleProcWait(ctx context.Context, cn *conn) error {
	p, err := s.procRef(cn)
	if err != nil {
		return err
	}
	gone := make(chan error, 1)
	go func() {
		_, _, err := cn.fr.Next()
		gone <- err
	}()
	defer func() {
		cn.c.SetReadDeadline(time.Now())
		<-gone
	}()
	select {
	case <-p.done:
	case err := <-gone:
		gone <- err
		return nil
	case <-ctx.Done():
		return nil
	}
	p.mu.Lock()
	exit := *p.exit
	p.mu.Unlock()
	return cn.fw.SendJSON(wire.FrameExit, exit)
}

// shutdownBg refuses new processes and makes every runner kill its own.
func (b *bgTable) shutdown() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		close(b.quit)
	}
}
