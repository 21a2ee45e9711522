// Package failpoint lets fault tests act at exact named points between an
// operation's side effects: kill the daemon there (as a crash would), make
// the step return an error, sleep, or panic. It is gofail's model (the
// failpoints bbolt and etcd test with), armed from the environment:
//
//	BERTH_FAILPOINTS="create.after-mount"                  SIGKILL at the point
//	BERTH_FAILPOINTS="create.after-mount=return(disk gone)" the step fails
//	BERTH_FAILPOINTS="fork.after-capture=sleep(2s);x=panic(boom)"
//	BERTH_FAILPOINTS="pool.refill.after-launch=1*return(once)"  first hit only
//
// Points are separated by ';' or ','; a term is kill, return(msg) (or
// error(msg)), sleep(duration), panic(msg) or off, optionally prefixed
// with N* to act on the first N hits only. A bare name is kill, as it
// always was.
//
// BERTH_FAILPOINTS_FILE names a file in the same syntax, read again at
// every hit, so a test can arm and disarm points in a running daemon
// (the error-injection matrix does, one step after another, without a
// restart per step). Both unset, a hit costs one length check.
//
// Arm does the same in process for unit tests. The points: create
// (create.before-mount, create.after-mount, create.after-start), secrets
// (secrets.deliver), fork and snapshot (fork.after-capture,
// capture.frozen, snapshot.after-capture), restore (restore.before-revert),
// volume.create.after-record, volume attach at create
// (volume.attach.after-record, volume.attach.after-mount),
// network.rules.apply, a warm pool's refill (pool.refill.after-launch,
// pool.refill.before-pause), runsc.probe (the daemon's probe of gVisor at
// start and its retries), a template build (build.after-launch: its
// sandbox made; build.after-commit: a step's layer in the store, not yet
// cached; build.before-record: every layer made, the template not
// recorded), import.after-unpack (an import's or upload's layers unpacked, its
// template not recorded), secrets.rewrap and secrets.rotate.after-rewrap (a
// master key rotation), hibernate (hibernate.after-quiesce,
// -after-checkpoint, -after-marker, -after-stopping, -after-stophost: a
// failure after the save wakes the sandbox from its image), wake
// (wake.after-starting, wake.before-restore, -after-restore, -after-ready,
// -after-marker; wake.before-running, past the image's removal, kills
// only), and the backend-neutral pause.after-freeze, stop.after-node and
// start.after-provision that test/k8s kills a replica with. The
// error-injection matrix (test/e2e/faults_test.go, TestErrorInjectionMatrix
// and make soak's TestSoakErrorInjectionMatrix) drives each return point:
// the call must answer 500 with its request id (a refill, which no request
// waits for, removes its member), leave what it worked on as it was,
// doctor clean, and nothing for the leak check.
package failpoint

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Action is what an armed point does.
type Action int

const (
	Kill   Action = iota // SIGKILL this process
	Return               // the step returns an *Error
	Sleep                // the step is delayed, then goes on
	Panic                // the step panics
	Off                  // listed but disarmed
)

// Term is one armed point's behaviour.
type Term struct {
	Action Action
	Msg    string        // Return and Panic
	Delay  time.Duration // Sleep
	Count  int           // act on the first Count hits only; 0 = every hit
}

// Error is the error a Return point makes its step fail with.
type Error struct {
	Point string
	Msg   string
}

func (e *Error) Error() string { return "failpoint " + e.Point + ": " + e.Msg }

var (
	envPoints = mustParse(os.Getenv("BERTH_FAILPOINTS"))
	file      = os.Getenv("BERTH_FAILPOINTS_FILE")

	mu       sync.Mutex
	fileText []byte          // the file's content last read
	filePts  map[string]Term // and its points
	armedPts map[string]Term // Arm's, in this process
	anyArmed atomic.Bool
	hits     = map[string]int{}
)

// Arm arms the points of spec (BERTH_FAILPOINTS syntax) in this process,
// over what the environment armed, until disarm is called: for tests that
// drive the engine in process. Arms do not nest.
func Arm(spec string) (disarm func(), err error) {
	m, err := Parse(spec)
	if err != nil {
		return nil, err
	}
	mu.Lock()
	armedPts, hits = m, map[string]int{}
	mu.Unlock()
	anyArmed.Store(true)
	return func() {
		mu.Lock()
		armedPts = nil
		mu.Unlock()
		anyArmed.Store(false)
	}, nil
}

func mustParse(s string) map[string]Term {
	m, err := Parse(s)
	if err != nil {
		// A test armed something this build does not understand: acting
		// as if nothing were armed would let it pass for the wrong
		// reason.
		fmt.Fprintln(os.Stderr, "BERTH_FAILPOINTS:", err)
		os.Exit(2)
	}
	return m
}

// Parse reads a BERTH_FAILPOINTS value.
func Parse(s string) (map[string]Term, error) {
	m := map[string]Term{}
	for _, p := range split(s) {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		name, spec, found := strings.Cut(p, "=")
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, fmt.Errorf("%q: no point name", p)
		}
		t := Term{Action: Kill}
		if found {
			var err error
			if t, err = parseTerm(strings.TrimSpace(spec)); err != nil {
				return nil, fmt.Errorf("point %s: %w", name, err)
			}
		}
		m[name] = t
	}
	return m, nil
}

// split cuts s at ';' and ',' outside parentheses.
func split(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch {
		case c == '(':
			depth++
		case c == ')' && depth > 0:
			depth--
		case (c == ';' || c == ',') && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

func parseTerm(s string) (Term, error) {
	var t Term
	if n, rest, ok := strings.Cut(s, "*"); ok && !strings.Contains(n, "(") {
		c, err := strconv.Atoi(strings.TrimSpace(n))
		if err != nil || c < 1 {
			return t, fmt.Errorf("bad count %q", n)
		}
		t.Count, s = c, strings.TrimSpace(rest)
	}
	verb, arg := s, ""
	if i := strings.IndexByte(s, '('); i >= 0 {
		if !strings.HasSuffix(s, ")") {
			return t, fmt.Errorf("%q: unclosed argument", s)
		}
		verb, arg = s[:i], strings.Trim(s[i+1:len(s)-1], `"`)
	}
	switch verb {
	case "kill", "":
		t.Action = Kill
	case "return", "error":
		t.Action, t.Msg = Return, arg
		if t.Msg == "" {
			t.Msg = "injected error"
		}
	case "panic":
		t.Action, t.Msg = Panic, arg
		if t.Msg == "" {
			t.Msg = "injected panic"
		}
	case "sleep":
		d, err := time.ParseDuration(arg)
		if err != nil {
			ms, merr := strconv.Atoi(arg) // gofail's sleep(100) is milliseconds
			if merr != nil || ms < 0 {
				return t, fmt.Errorf("sleep(%s): %v", arg, err)
			}
			d = time.Duration(ms) * time.Millisecond
		}
		t.Action, t.Delay = Sleep, d
	case "off":
		t.Action = Off
	default:
		return t, fmt.Errorf("unknown action %q (kill, return, error, sleep, panic, off)", verb)
	}
	return t, nil
}

// armed returns point name's term, if armed, counting the hit.
func armed(name string) (Term, bool) {
	if len(envPoints) == 0 && file == "" && !anyArmed.Load() {
		return Term{}, false
	}
	mu.Lock()
	defer mu.Unlock()
	if t, ok := armedPts[name]; ok {
		return count(name, t)
	}
	pts := envPoints
	if file != "" {
		b, _ := os.ReadFile(file) // a missing file arms nothing
		if filePts == nil || !bytes.Equal(b, fileText) {
			m, perr := Parse(string(b))
			if perr != nil {
				fmt.Fprintln(os.Stderr, "BERTH_FAILPOINTS_FILE:", perr)
				os.Exit(2)
			}
			fileText, filePts = b, m
			hits = map[string]int{} // a new arming counts afresh
		}
		if t, ok := filePts[name]; ok {
			return count(name, t)
		}
	}
	t, ok := pts[name]
	if !ok {
		return Term{}, false
	}
	return count(name, t)
}

func count(name string, t Term) (Term, bool) {
	if t.Action == Off {
		return t, false
	}
	hits[name]++
	if t.Count > 0 && hits[name] > t.Count {
		return t, false
	}
	return t, true
}

// Inject acts at point name if it is armed: a kill never returns, a
// sleep returns nil after its delay, a panic panics, and a return term
// is the step's error (an *Error). Call it where the step can fail:
//
//	if err := failpoint.Inject("fork.after-capture"); err != nil {
//		return err
//	}
func Inject(name string) error {
	t, ok := armed(name)
	if !ok {
		return nil
	}
	switch t.Action {
	case Kill:
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never returns
	case Sleep:
		time.Sleep(t.Delay)
	case Panic:
		panic(fmt.Sprintf("failpoint %s: %s", name, t.Msg))
	case Return:
		return &Error{Point: name, Msg: t.Msg}
	}
	return nil
}

// Hit is Inject at a point whose step cannot fail (a return term there
// does nothing).
func Hit(name string) { _ = Inject(name) }

// Enabled reports whether a point is armed (BERTH_FAILPOINTS only); for
// test-only switches that alter behaviour rather than fail.
func Enabled(name string) bool {
	t, ok := envPoints[name]
	return ok && t.Action != Off
}
