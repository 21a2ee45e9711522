package wire

// Graceful stop (agentd shutdown.go): before the daemon kills a sandbox it
// asks the agent to signal every process and wait for them, at most a
// grace. The daemon bounds the call with its own deadline and kills the
// sandbox whatever the answer: a reply can only shorten a stop.
const (
	// OpShutdown sends Shutdown.Signal to every process of the sandbox
	// (the background processes' groups, marked never to restart, and, when
	// the agent is PID 1, every other process of its pid namespace) and
	// answers a ShutdownResult once they are gone or the grace has passed.
	OpShutdown = "shutdown"
)

// MaxShutdownGraceMS caps ShutdownRequest.GraceMS (10 minutes).
const MaxShutdownGraceMS = 10 * 60 * 1000

// ShutdownRequest is the shutdown part of a request header.
type ShutdownRequest struct {
	Signal  string `json:"signal,omitempty"` // "SIGTERM" (default) or "TERM"
	GraceMS int64  `json:"grace_ms"`
}

// ShutdownResult answers a shutdown: how many processes other than the
// agent were left when it answered (0: all gone within the grace).
type ShutdownResult struct {
	Remaining int `json:"remaining"`
}
