package engine

import (
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
)

// ReasonHibernated is the reason a hibernated sandbox's record carries.
const ReasonHibernated = "hibernated"

// hibernated reports whether sb is stopped with its processes and memory
// saved, to be restored by Wake.
func (m *Engine) hibernated(sb *sandbox.Sandbox) bool {
	return sb.State == sandbox.StateStopped && node.Hibernated(m.node, sb)
}

// classOf names sb's runtime class.
func (m *Engine) classOf(sb *sandbox.Sandbox) string {
	if sb.Spec.Runtime != "" {
		return sb.Spec.Runtime
	}
	return m.DefaultRuntime()
}
