package local

// The channel to a sandbox's agent: package agentchan holds the boundary
// (socket binding, pin, SO_PEERCRED verification, the init log ring);
// this keeps one channel and one init log per sandbox and reports
// refusals.

import (
	"os"
	"time"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/node/local/agentchan"
	"github.com/berth-sh/berth/internal/sandbox"
)

func (b *Backend) channel(id string) *agentchan.Channel {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch, ok := b.channels[id]
	if !ok {
		p := b.paths(id)
		ch = agentchan.New(agentchan.Paths{Ctl: p.ctl, Run: p.run, Pin: p.pin, Cgroup: p.cgroup}, b.log.With("sandbox", id))
		b.channels[id] = ch
	}
	return ch
}

// newAgentClient returns the client of sandbox id's agent.
func (b *Backend) newAgentClient(id string) *agent.Client {
	ch := b.channel(id)
	c := agent.NewClientDialer(ch.Dial(func(err error) { b.refuseAgent(id, ch, err) }))
	c.SetIdleTimeout(agentIdleTimeout)
	return c
}

// agentIdleTimeout ends a file operation on which an agent has moved no
// byte for that long: the daemon's deadline, not the agent's.
const agentIdleTimeout = 30 * time.Second

// refuseAgent records a refused dial: always in the log and the counter,
// as an event at most every 10 s per sandbox (the store is not a sink a
// sandbox may fill).
func (b *Backend) refuseAgent(id string, ch *agentchan.Channel, cause error) {
	b.agentRefused.Add(1)
	b.log.Warn("agent channel refused", "sandbox", id, "err", cause)
	if ch.EventDue() {
		b.emit(&sandbox.Event{SandboxID: id, Type: "security", Actor: "daemon",
			Cause: sandbox.CauseReconciler, Outcome: "refused", Message: cause.Error()})
	}
}

// resetAgentPin forgets the pinned agent socket of id: called before its
// agent starts (or is restored), whose new socket the next ping pins.
func (b *Backend) resetAgentPin(id string) error { return b.channel(id).Reset() }

// openInitLog returns the write end of a new init log pipe for id; the
// caller passes it to the runtime and closes its copy once the container
// holds it.
func (b *Backend) openInitLog(id string) (*os.File, error) {
	l, w, err := agentchan.OpenInitLog()
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.initLogs[id] = l
	b.mu.Unlock()
	return w, nil
}

// initLogTail returns up to n bytes of the end of id's init log, giving
// the drain up to wait to reach the end of what was written.
func (b *Backend) initLogTail(id string, n int, wait time.Duration) string {
	b.mu.Lock()
	l := b.initLogs[id]
	b.mu.Unlock()
	if l == nil {
		return ""
	}
	return l.Tail(n, wait)
}
