// Package keyfile reads the shared secret keys an operator gives several
// daemons of one store (the audit seal key, the token signing key): a file
// is never made here — two daemons each making their own would disagree —
// and it must be a regular file readable by its owner only, holding at
// least 32 bytes (read up to 4 KiB).
//
// Install (hidden verb berth install-keys, the Helm chart's init container)
// copies a Kubernetes Secret volume's keys 0600 into the data dir, since the
// kubelet makes the volume group-readable under fsGroup.
package keyfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/berth-sh/berth/internal/atomicfile"
)

// MinBytes is the shortest key accepted.
const MinBytes = 32

// Read loads the key at path; what names it in errors ("audit key").
func Read(path, what string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s file: %w (make one with: head -c 32 /dev/urandom > %s && chmod 600 %s)", what, err, path, path)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s file: %w", what, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s file %s is not a regular file", what, path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s file %s is readable by others (mode %v): chmod 600 it", what, path, fi.Mode().Perm())
	}
	key, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return nil, fmt.Errorf("%s file: %w", what, err)
	}
	if len(key) < MinBytes {
		return nil, fmt.Errorf("%s %s is too short (%d bytes; want at least %d)", what, path, len(key), MinBytes)
	}
	return key, nil
}

// MaxInstallBytes bounds one file Install copies (a secrets keyring of
// many keys is a few KiB).
const MaxInstallBytes = 64 << 10

// Install copies every key file of dir from (a Kubernetes Secret volume:
// its files are symlinks into a hidden ..data directory, made
// group-readable under the pod's fsGroup) into dir to, which it makes
// 0700, each copy 0600 and owned by the process, so that Read accepts it.
// Names starting with "." (the volume's own bookkeeping) are skipped;
// anything else that is not a regular file after symlinks, or is larger
// than MaxInstallBytes, is an error. Each copy is written to a temporary
// file and renamed in, so a reader never sees half a key. It returns the
// names installed.
//
// This is the chart's init container (berth install-keys): the serving
// container never mounts the Secret, and Read's rule — a key file its
// owner's alone — stays whole rather than being relaxed for the fsGroup.
func Install(from, to string) ([]string, error) {
	ents, err := os.ReadDir(from)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(to, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chmod(to, 0o700); err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		src := filepath.Join(from, name)
		fi, err := os.Stat(src)
		if err != nil {
			return names, err
		}
		if !fi.Mode().IsRegular() {
			return names, fmt.Errorf("%s is not a regular file", src)
		}
		if fi.Size() > MaxInstallBytes {
			return names, fmt.Errorf("%s is %d bytes (at most %d)", src, fi.Size(), MaxInstallBytes)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return names, err
		}
		if len(data) > MaxInstallBytes {
			return names, fmt.Errorf("%s grew past %d bytes", src, MaxInstallBytes)
		}
		if err := atomicfile.Write(filepath.Join(to, name), data, 0o600); err != nil {
			return names, err
		}
		names = append(names, name)
	}
	return names, nil
}
