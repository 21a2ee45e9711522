package agent

import "github.com/berth-sh/berth/internal/agent/wire"

// The wire messages the client's callers see, under their old names.
type (
	// Exit is how an exec's process ended.
	Exit = wire.Exit
	// FileInfo describes one file.
	FileInfo = wire.FileInfo
	// Resize is a terminal's new size.
	Resize = wire.Resize
)

// SigRelisten is the signal that makes a quiesced agent listen again
// after a checkpoint restore (see Client.Quiesce).
const SigRelisten = wire.SigRelisten
