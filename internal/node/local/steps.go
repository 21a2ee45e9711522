package local

import "time"

// The steps of a Provision, timed for Config.Step in the order they run:
//
//	mounts         volumes, the writable layer's scratch image, the
//	               sandbox's directories and its overlay root
//	userns         the sandbox's user namespace (kept, or made)
//	netns          egress only: resolv.conf, and the netns wired before
//	               the start where the runtime takes one
//	agent-channel  the agent's socket (bound here, or a tmpfs) and its log
//	runtime-start  the runtime's create and start (runc or runsc)
//	network        the netns wired after the start, where it is the init's
//	agent-ready    the agent's first answer
const (
	StepMounts       = "mounts"
	StepUserns       = "userns"
	StepNetns        = "netns"
	StepAgentChannel = "agent-channel"
	StepRuntimeStart = "runtime-start"
	StepNetwork      = "network"
	StepAgentReady   = "agent-ready"
)

// Steps lists the steps in the order they run.
var Steps = []string{StepMounts, StepUserns, StepNetns, StepAgentChannel, StepRuntimeStart, StepNetwork, StepAgentReady}

// stepTimer reports the time since its last mark as the named step's.
type stepTimer struct {
	report func(string, time.Duration)
	last   time.Time
}

func (b *Backend) stepTimer() *stepTimer {
	return &stepTimer{report: b.cfg.Step, last: time.Now()}
}

// mark ends step now and starts the next.
func (t *stepTimer) mark(step string) {
	now := time.Now()
	if t.report != nil {
		t.report(step, now.Sub(t.last))
	}
	t.last = now
}
