package sandbox

// HasSecretFiles reports whether the spec references a secret delivered
// as a file: such a sandbox gets a tmpfs at /run/secrets.
func (s *Spec) HasSecretFiles() bool {
	for _, r := range s.Secrets {
		if r.File != "" {
			return true
		}
	}
	return false
}
