package sandbox

// SecretRef is a sandbox's reference to one of its tenant's secrets: its
// execs get the value as env var Env. Only names are kept in the spec (and
// so in the store, inspect and events); the value is resolved at each exec.
type SecretRef struct {
	Name string `json:"name"`
	Env  string `json:"env"`
}
