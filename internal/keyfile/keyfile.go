// Package keyfile reads the shared secret keys an operator gives several
// daemons of one store (the audit seal key, the token signing key): a file
// is never made here — two daemons each making their own would disagree —
// and it must be a regular file readable by its owner only, holding at
// least 32 bytes (read up to 4 KiB).
package keyfile

import (
	"fmt"
	"io"
	"os"
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
