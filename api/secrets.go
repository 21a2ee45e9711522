package api

import "time"

// PutSecretRequest is the body of PUT /v1/secrets/{name}. The value never
// comes back: no route returns it.
type PutSecretRequest struct {
	Value string `json:"value"`
}

// Secret is a secret's metadata: never its value.
type Secret struct {
	Name      string    `json:"name"`
	KeyID     string    `json:"key_id"` // the master key wrapping its data key
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// RotateSecretsKeyRequest is the body of POST /v1/secrets/rotate-key
// (admin): the new master key, standard base64 of 32 bytes.
type RotateSecretsKeyRequest struct {
	Key string `json:"key"`
}

// RotateSecretsKeyResponse says what a rotation did.
type RotateSecretsKeyResponse struct {
	KeyID     string   `json:"key_id"`
	Rewrapped int      `json:"rewrapped"`
	Removed   []string `json:"removed,omitempty"`
	// KeyFile is the key file the daemon rewrote with the new key only;
	// empty when the keys came from BERTH_SECRETS_KEY, which the operator
	// must now set to the new key before the next start.
	KeyFile string `json:"key_file,omitempty"`
}

// SecretRef names a secret of the caller's a sandbox gets: as the env var
// Env (default: its name) of every exec in it. Only the reference is
// stored with the sandbox; the value is read at each exec, so a removed
// secret is no longer given.
type SecretRef struct {
	Name string `json:"name"`
	Env  string `json:"env,omitempty"`
	// File, when set, is a path under /run/secrets instead of an env var:
	// the value is a file there (0400, owned by the sandbox's user) on a
	// tmpfs, never the writable layer, written at every start.
	File string `json:"file,omitempty"`
	// EgressHost, when set, injects the secret at the egress proxy
	// instead: the env var Env (default: the name) holds only a
	// placeholder, which berth's egress proxy replaces by the value in
	// the headers of HTTPS requests to this host alone. The sandbox must
	// be in network mode egress with a rule allowing this host on TCP 443.
	EgressHost string `json:"egress_host,omitempty"`
}
