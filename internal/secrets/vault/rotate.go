package vault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/secrets"
)

// Rotation is what Rotate did.
type Rotation struct {
	KeyID     string // the new primary
	Rewrapped int
	Removed   []string // the master key ids no longer held
	// KeyFile is the key file rewritten with the new key only; "" when
	// the keys came from the environment, which the operator must change.
	KeyFile string
}

// Rotate makes newKey the primary without downtime: the keyring holds the
// new key and the old ones (and, with a key file, so does the file, before
// anything is re-wrapped: a crash at any point leaves keys that open every
// secret), every data key is re-wrapped under the new key, then the old keys
// are dropped from memory and the file. keyFile is "" when the keys came
// from the environment.
func (v *Vault) Rotate(ctx context.Context, newKey secrets.Key, keyFile string) (Rotation, error) {
	v.mu.Lock()
	old := v.kr
	v.mu.Unlock()
	oldKeys := old.Keys()
	both, err := secrets.NewKeyring(append([]secrets.Key{newKey}, oldKeys...)...)
	if err != nil {
		return Rotation{}, err
	}
	if keyFile != "" {
		if err := writeKeyFile(keyFile, both.Keys()); err != nil {
			return Rotation{}, err
		}
	}
	v.SetKeyring(both)
	n, err := v.Rewrap(ctx)
	if err != nil {
		// Both keys stay held (and in the file): nothing is lost, and
		// rotating again finishes the job.
		return Rotation{KeyID: newKey.ID, Rewrapped: n}, fmt.Errorf("rotation: %w (both keys are kept; run it again)", err)
	}
	if err := failpoint.Inject("secrets.rotate.after-rewrap"); err != nil {
		return Rotation{KeyID: newKey.ID, Rewrapped: n}, fmt.Errorf("rotation: %w (both keys are kept; run it again)", err)
	}
	only, _ := secrets.NewKeyring(newKey)
	if keyFile != "" {
		if err := writeKeyFile(keyFile, only.Keys()); err != nil {
			return Rotation{KeyID: newKey.ID, Rewrapped: n}, err
		}
	}
	v.SetKeyring(only)
	r := Rotation{KeyID: newKey.ID, Rewrapped: n, KeyFile: keyFile}
	for _, k := range oldKeys {
		if k.ID != newKey.ID {
			r.Removed = append(r.Removed, k.ID)
		}
	}
	return r, nil
}

// writeKeyFile replaces path atomically with keys, 0600.
func writeKeyFile(path string, keys []secrets.Key) error {
	var b strings.Builder
	b.WriteString("# berth secrets master keys: the first encrypts, all decrypt\n")
	for _, k := range keys {
		b.WriteString(k.Encode() + "\n")
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".secrets-key-*")
	if err != nil {
		return fmt.Errorf("rewriting the secrets key file: %w", err)
	}
	tmp := f.Name()
	_, werr := f.WriteString(b.String())
	if err := errors.Join(werr, f.Chmod(0o600), f.Sync(), f.Close()); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("rewriting the secrets key file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("rewriting the secrets key file: %w", err)
	}
	return nil
}
