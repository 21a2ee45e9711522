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
	// EgressHost, when set, makes Env hold Placeholder, never the value:
	// the daemon's egress proxy puts the value into the headers of the
	// sandbox's HTTPS requests to this host (lower-case) only.
	EgressHost string `json:"egress_host,omitempty"`
	// Placeholder is what Env holds for an egress reference: random, made
	// at create (secrets.NewPlaceholder) and copied with the spec.
	Placeholder string `json:"placeholder,omitempty"`
}

// Egress reports whether r is injected by the egress proxy.
func (r SecretRef) Egress() bool { return r.EgressHost != "" }
