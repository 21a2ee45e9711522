package wire

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/berth-sh/berth/internal/errdefs"
)

// OpSecretFiles makes the sandbox's secrets tmpfs (SecretDir) hold exactly
// the files of the request's one data frame (a JSON SecretFiles), then
// answers with an end frame: each listed file written 0400 and owned by
// the request's Owner, every other entry there overwritten and removed.
const OpSecretFiles = "secret_files"

// SecretDir is where the secrets tmpfs is mounted in a sandbox.
const SecretDir = "/run/secrets"

// Bounds of a SecretFiles request (the tmpfs itself is 1 MiB).
const (
	MaxSecretFiles     = 64
	MaxSecretFileBytes = 64 << 10
	MaxSecretBytes     = 512 << 10 // all the files' data together
	MaxSecretPath      = 255
)

// SecretFile is one file of the secrets tmpfs.
type SecretFile struct {
	Path string `json:"path"` // absolute, under SecretDir
	Data []byte `json:"data"`
}

// SecretFiles is the data frame of OpSecretFiles.
type SecretFiles struct {
	Files []SecretFile `json:"files"`
	// EgressCA, when set, is the sandbox's egress CA certificate (PEM):
	// the agent writes EgressCABundle, 0444 root's, holding the image's
	// own system CA bundle (the first of SystemCABundles that is a
	// regular file, at most MaxSystemCABytes) followed by it.
	EgressCA []byte `json:"egress_ca,omitempty"`
	// SystemCA is the host's system CA bundle, used instead of the
	// image's when the image has none (a template on the host's /usr).
	SystemCA []byte `json:"system_ca,omitempty"`
}

// EgressCABundle is the CA bundle of a sandbox with egress secrets, on the
// secrets tmpfs (so never in a snapshot, fork or diff). No secret file
// may take its path.
const EgressCABundle = SecretDir + "/berth-egress-ca-bundle.pem"

// Bounds of the egress CA bundle.
const (
	MaxEgressCABytes = 16 << 10
	MaxSystemCABytes = 384 << 10
)

// SystemCABundles are where images keep their system CA bundle (Debian and
// Alpine, RHEL, SUSE, others), tried in this order inside the sandbox.
var SystemCABundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// DecodeSecretFiles reads and validates the data frame of OpSecretFiles:
// at most MaxSecretFiles files of at most MaxSecretFileBytes each and
// MaxSecretBytes in all; paths absolute, clean, under SecretDir, of
// letters, digits, _, - and . (no . or .. component), at most
// MaxSecretPath bytes; no path twice, none a directory of another.
// It returns the paths relative to SecretDir.
func DecodeSecretFiles(p []byte) (SecretFiles, []string, error) {
	var sf SecretFiles
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sf); err != nil {
		return SecretFiles{}, nil, errdefs.Invalid("secret files: %v", err)
	}
	if dec.More() {
		return SecretFiles{}, nil, errdefs.Invalid("secret files: trailing data")
	}
	if len(sf.EgressCA) > MaxEgressCABytes {
		return SecretFiles{}, nil, errdefs.TooLarge("egress CA: at most %d bytes", MaxEgressCABytes)
	}
	if len(sf.SystemCA) > MaxSystemCABytes {
		return SecretFiles{}, nil, errdefs.TooLarge("system CA bundle: at most %d bytes", MaxSystemCABytes)
	}
	if len(sf.Files) > MaxSecretFiles {
		return SecretFiles{}, nil, errdefs.TooLarge("secret files: at most %d files", MaxSecretFiles)
	}
	total := 0
	rels := make([]string, len(sf.Files))
	seen := map[string]bool{}
	for i, f := range sf.Files {
		if len(f.Data) > MaxSecretFileBytes {
			return SecretFiles{}, nil, errdefs.TooLarge("secret file %d: at most %d bytes", i, MaxSecretFileBytes)
		}
		total += len(f.Data)
		if total > MaxSecretBytes {
			return SecretFiles{}, nil, errdefs.TooLarge("secret files: at most %d bytes in all", MaxSecretBytes)
		}
		rel, err := secretRel(f.Path)
		if err != nil {
			return SecretFiles{}, nil, err
		}
		if seen[rel] {
			return SecretFiles{}, nil, errdefs.Invalid("secret file %d: path given twice", i)
		}
		if f.Path == EgressCABundle {
			return SecretFiles{}, nil, errdefs.Invalid("secret file %d: %s is the egress CA bundle's", i, EgressCABundle)
		}
		seen[rel] = true
		rels[i] = rel
	}
	// A file may not be a directory of another (a/b and a/b/c).
	for _, r := range rels {
		for d := r; ; {
			j := strings.LastIndexByte(d, '/')
			if j < 0 {
				break
			}
			d = d[:j]
			if seen[d] {
				return SecretFiles{}, nil, errdefs.Invalid("secret file %s/%s is also a directory of another", SecretDir, d)
			}
		}
	}
	return sf, rels, nil
}

func secretRel(p string) (string, error) {
	rel, ok := strings.CutPrefix(p, SecretDir+"/")
	if !ok || rel == "" || len(p) > MaxSecretPath {
		return "", errdefs.Invalid("secret file path: want one under %s/ of at most %d bytes", SecretDir, MaxSecretPath)
	}
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." || c == ".." {
			return "", errdefs.Invalid("secret file path: empty, . or .. component")
		}
		for i := 0; i < len(c); i++ {
			b := c[i]
			if !(b == '_' || b == '-' || b == '.' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9') {
				return "", errdefs.Invalid("secret file path: only letters, digits, _, - and . in its components")
			}
		}
	}
	return rel, nil
}
