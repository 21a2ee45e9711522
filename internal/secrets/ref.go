package secrets

import (
	"strings"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Kind is how a referenced secret reaches a sandbox.
type Kind string

// Kinds of injection.
const (
	// Env: an environment variable of every exec in the sandbox.
	Env Kind = "env"
	// File: a file on the sandbox's secrets tmpfs (FileDir).
	File Kind = "file"
	// Egress: the sandbox sees a placeholder; berth's egress proxy puts
	// the value in requests to the named host only.
	Egress Kind = "egress"
)

// FileDir is where file secrets are: a tmpfs of the sandbox, never its
// writable layer.
const FileDir = "/run/secrets"

// MaxName bounds a secret's name.
const MaxName = 128

// Ref is one parsed secret reference.
type Ref struct {
	Name string
	Kind Kind
	// Target is the env var (Env), the absolute path under FileDir
	// (File), or the lower-case host name (Egress).
	Target string
}

// String is the canonical form, which ParseRef reads back as r.
func (r Ref) String() string { return r.Name + "=" + string(r.Kind) + ":" + r.Target }

// CheckName accepts a secret name: a letter or _, then letters, digits and
// _, at most MaxName bytes (so a name is also a valid env var name).
func CheckName(name string) error {
	if !isIdent(name) || len(name) > MaxName {
		return errdefs.Invalid("secret name %q: want a letter or _ then letters, digits and _, at most %d bytes", clip(name), MaxName)
	}
	return nil
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// ParseRef reads `NAME[=env:VAR|file:/path|egress:HOST]`. NAME alone is
// NAME=env:NAME. File paths are absolute, clean, under FileDir, of
// components of letters, digits, `_`, `-` and `.` (not `.` or `..`); host
// names are DNS names (letters, digits and `-` in labels of 1-63 bytes, at
// most 253 bytes), kept lower-case.
func ParseRef(s string) (Ref, error) {
	name, rest, hasTarget := strings.Cut(s, "=")
	if err := CheckName(name); err != nil {
		return Ref{}, err
	}
	if !hasTarget {
		return Ref{Name: name, Kind: Env, Target: name}, nil
	}
	kind, target, ok := strings.Cut(rest, ":")
	if !ok {
		return Ref{}, errdefs.Invalid("secret %s: want %s=env:VAR, =file:%s/NAME or =egress:HOST", name, name, FileDir)
	}
	r := Ref{Name: name, Kind: Kind(kind)}
	var err error
	r.Target, err = CheckTarget(r.Kind, target)
	if err != nil {
		return Ref{}, errdefs.Invalid("secret %s: %s", name, errdefs.Message(err))
	}
	return r, nil
}

// CheckTarget validates target for kind and returns its canonical form.
func CheckTarget(kind Kind, target string) (string, error) {
	switch kind {
	case Env:
		if !isIdent(target) || len(target) > MaxName {
			return "", errdefs.Invalid("env var %q: want a letter or _ then letters, digits and _", clip(target))
		}
		return target, nil
	case File:
		return target, checkFile(target)
	case Egress:
		h := strings.ToLower(target)
		return h, checkHost(h)
	default:
		return "", errdefs.Invalid("kind %q: want env, file or egress", clip(string(kind)))
	}
}

func checkFile(p string) error {
	rel, ok := strings.CutPrefix(p, FileDir+"/")
	if !ok || rel == "" || len(p) > 255 {
		return errdefs.Invalid("file %q: want a path under %s/ of at most 255 bytes", clip(p), FileDir)
	}
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." || c == ".." {
			return errdefs.Invalid("file %q: empty, . or .. component", clip(p))
		}
		for i := 0; i < len(c); i++ {
			b := c[i]
			if !(b == '_' || b == '-' || b == '.' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9') {
				return errdefs.Invalid("file %q: only letters, digits, _, - and . in its components", clip(p))
			}
		}
	}
	return nil
}

func checkHost(h string) error {
	if h == "" || len(h) > 253 {
		return errdefs.Invalid("host %q: want a DNS name of 1-253 bytes", clip(h))
	}
	for _, l := range strings.Split(h, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return errdefs.Invalid("host %q: labels are 1-63 bytes, not starting or ending with -", clip(h))
		}
		for i := 0; i < len(l); i++ {
			b := l[i]
			if !(b == '-' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9') {
				return errdefs.Invalid("host %q: only letters, digits and - in its labels", clip(h))
			}
		}
	}
	return nil
}

// clip keeps error messages short and free of control bytes.
func clip(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}
