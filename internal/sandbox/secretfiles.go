package sandbox

// HasSecretFiles reports whether the spec references a secret delivered
// as a file, or one injected by the egress proxy (whose CA bundle is a
// file there): such a sandbox gets a tmpfs at /run/secrets.
func (s *Spec) HasSecretFiles() bool {
	for _, r := range s.Secrets {
		if r.File != "" || r.Egress() {
			return true
		}
	}
	return false
}

// HasEgressSecrets reports whether the spec references a secret injected
// by the egress proxy.
func (s *Spec) HasEgressSecrets() bool {
	for _, r := range s.Secrets {
		if r.Egress() {
			return true
		}
	}
	return false
}
