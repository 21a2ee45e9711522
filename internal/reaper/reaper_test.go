package reaper

import (
	"errors"
	"log/slog"
	"os/exec"
	"sync"
	"testing"
	"time"

	"os"
)

// TestReapsOrphansWithoutStealing: with the reaper running, children
// waited by exec.Cmd keep their exit statuses (none is taken from its
// Wait), and the orphans that their exits hand to this process are
// reaped: none is left a zombie.
func TestReapsOrphansWithoutStealing(t *testing.T) {
	r, err := Start(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for range 4 {
		wg.Go(func() {
			for range n / 4 {
				// A waited child with its own status...
				err := exec.Command("sh", "-c", "exit 7").Run()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 7 {
					errs <- err
				}
				// ...and one that leaves an orphan behind it, which
				// becomes this process's child when sh exits.
				if err := exec.Command("sh", "-c", "sleep 0.01 & exit 0").Run(); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a waited child lost its status: %v", err)
	}
	// Every orphan ends within moments; the reaper must leave none.
	deadline := time.Now().Add(60 * time.Second)
	for {
		kids, err := children(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if len(kids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			z, _ := zombieChildren(os.Getpid())
			t.Fatalf("children left: %v (zombies %v)", kids, z)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := r.Reaped(); got < n {
		t.Fatalf("reaped %d orphans, want at least %d", got, n)
	}
}

func TestParseStat(t *testing.T) {
	for _, c := range []struct {
		in    string
		state byte
		ppid  int
		ok    bool
	}{
		{"12 (sleep) Z 34 12 12 0", 'Z', 34, true},
		{"12 (a) b) S 1 2", 'S', 1, true},
		{"12 (x", 0, 0, false},
		{"12 (x) ZZ 1", 0, 0, false},
		{"12 (x) Z", 0, 0, false},
		{"", 0, 0, false},
	} {
		state, ppid, ok := parseStat([]byte(c.in))
		if state != c.state || ppid != c.ppid || ok != c.ok {
			t.Errorf("parseStat(%q) = %c %d %v, want %c %d %v", c.in, state, ppid, ok, c.state, c.ppid, c.ok)
		}
	}
}

// FuzzParseStat: a process names itself (comm), so the text is partly
// chosen by sandbox code; parsing must never panic.
func FuzzParseStat(f *testing.F) {
	f.Add([]byte("1 (init) S 0 1 1"))
	f.Add([]byte("7 ()) Z 1 ( ) Z 9"))
	f.Add([]byte(")"))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseStat(b)
	})
}
