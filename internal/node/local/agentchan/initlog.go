package agentchan

import (
	"os"
	"sync"
	"time"
)

// InitLog keeps the tail of what a sandbox's init (the agent) and the
// runtime starting it printed: the write end of a pipe goes to the
// container as its stdout and stderr, the daemon drains the read end into
// a bounded buffer. Nothing of it lands in a host file, and a sandbox that
// floods its stdout costs the daemon a fixed amount of memory.
type InitLog struct {
	mu   sync.Mutex
	buf  []byte // the last initLogBytes bytes
	done chan struct{}
}

const initLogBytes = 16 << 10

// OpenInitLog returns a new init log and the write end of its pipe; the
// caller passes that to the runtime and closes its copy once the
// container holds it.
func OpenInitLog() (*InitLog, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	l := &InitLog{done: make(chan struct{})}
	go func() {
		defer close(l.done)
		defer r.Close()
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				l.mu.Lock()
				l.buf = append(l.buf, buf[:n]...)
				if over := len(l.buf) - initLogBytes; over > 0 {
					l.buf = append(l.buf[:0], l.buf[over:]...)
				}
				l.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	return l, w, nil
}

// Tail returns up to n bytes of the end of the log. wait gives the drain
// that long to reach the end of what was written (a container that failed
// to start holds no write end any more).
func (l *InitLog) Tail(n int, wait time.Duration) string {
	if wait > 0 {
		select {
		case <-l.done:
		case <-time.After(wait):
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	tail := l.buf
	if len(tail) > n {
		tail = tail[len(tail)-n:]
	}
	return string(tail)
}
