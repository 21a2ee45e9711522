package main

import "github.com/berth-sh/berth/client"

// hibernateVerbs save a sandbox's processes and memory to disk and bring
// them back (runtime classes that can checkpoint: runsc).
var hibernateVerbs = []lifecycleVerb{
	{use: "hibernate", multi: true, call: (*client.Client).Hibernate,
		short: "Save sandboxes' processes and memory to disk and stop them",
		long: `Hibernate sandboxes: their processes and memory are checkpointed to disk and
their compute and memory released; they are then stopped with reason
"hibernated". 'berth wake' restores them with every process where it was, also
after a daemon restart. Needs a runtime class that can checkpoint (create the
sandbox with --runtime runsc); runc sandboxes answer with a conflict naming why.`},
	{use: "wake", multi: true, call: (*client.Client).Wake,
		short: "Restore hibernated sandboxes, processes and memory as they were",
		long:  "Restore hibernated sandboxes: their files are mounted again and their processes continue from the checkpoint, with their memory. 'berth start' does not apply to a hibernated sandbox."},
}
