package sandbox

// SecretRef is a sandbox's reference to one of its tenant's secrets: its
// execs get the value as env var Env. Only names are kept in the spec (and
// so in the store, inspect and events); the value is resolved at each exec.
type SecretRef struct {
	Name string `json:"name"`
	Env  string `json:"env"`
	// File, when set, is a path under /run/secrets instead: the agent
	// writes the value there, 0400 and owned by the sandbox's user, on a
	// tmpfs, at every transition to running (Env is then empty).
	File string `json:"file,omitempty"`
}
