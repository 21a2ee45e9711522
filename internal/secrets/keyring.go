package secrets

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/berth-sh/berth/internal/errdefs"
)

// KeySize is the size of a master or data key: AES-256.
const KeySize = 32

// EnvKey is the environment variable that may hold the master key(s), in
// the key file's format.
const EnvKey = "BERTH_SECRETS_KEY"

// Key is one master key.
type Key struct {
	ID  string
	raw [KeySize]byte
}

// NewKey returns a fresh random key.
func NewKey() (Key, error) {
	var raw [KeySize]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return Key{}, err
	}
	return keyOf(raw), nil
}

func keyOf(raw [KeySize]byte) Key {
	h := sha256.Sum256(append([]byte("berth secrets master key id\x00"), raw[:]...))
	return Key{ID: hex.EncodeToString(h[:8]), raw: raw}
}

// Encode is the key as a line of the key file (standard base64).
func (k Key) Encode() string { return base64.StdEncoding.EncodeToString(k.raw[:]) }

// Keyring is an ordered set of master keys: Primary encrypts, all decrypt.
type Keyring struct {
	keys []Key
}

// NewKeyring makes a keyring of keys, the first primary. Duplicates are
// dropped; at least one key is required.
func NewKeyring(keys ...Key) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errdefs.Invalid("secrets keyring: no key")
	}
	kr := &Keyring{}
	for _, k := range keys {
		if kr.find(k.ID) == nil {
			kr.keys = append(kr.keys, k)
		}
	}
	return kr, nil
}

// Primary is the key new data keys are wrapped under.
func (kr *Keyring) Primary() Key { return kr.keys[0] }

// IDs are the keys' ids, primary first.
func (kr *Keyring) IDs() []string {
	out := make([]string, len(kr.keys))
	for i, k := range kr.keys {
		out[i] = k.ID
	}
	return out
}

func (kr *Keyring) find(id string) *Key {
	for i := range kr.keys {
		if kr.keys[i].ID == id {
			return &kr.keys[i]
		}
	}
	return nil
}

// ParseKeys reads the key file format: one standard-base64 32-byte key a
// line, the first primary; blank lines and lines starting with # are
// ignored. Errors never quote a line (it may be a key).
func ParseKeys(data []byte) ([]Key, error) {
	var keys []Key
	sc := bufio.NewScanner(bytes.NewReader(data))
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(line)
		if err != nil || len(raw) != KeySize {
			return nil, errdefs.Invalid("secrets key line %d: want the standard base64 of %d bytes", n, KeySize)
		}
		keys = append(keys, keyOf([KeySize]byte(raw)))
	}
	if err := sc.Err(); err != nil {
		return nil, errdefs.Invalid("secrets keys: %v", err)
	}
	if len(keys) == 0 {
		return nil, errdefs.Invalid("secrets keys: no key")
	}
	return keys, nil
}

// ReadKeyFile reads a key file, refusing one that others than its owner
// may read.
func ReadKeyFile(path string) ([]Key, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("secrets key file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, errdefs.Invalid("secrets key file %s is mode %v: it must be readable by its owner only (chmod 600)", path, fi.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secrets key file: %w", err)
	}
	keys, err := ParseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

// Source says where Load found the keyring.
type Source string

// Sources of a keyring.
const (
	FromFile      Source = "file"
	FromEnv       Source = "env"
	FromDataDir   Source = "data-dir"
	GeneratedHere Source = "generated"
)

// Load finds the keyring: keyFile if set, else the environment's EnvKey
// (getenv), else <dataDir>/secrets.key, made with a fresh key (0600) when
// it does not exist.
func Load(keyFile string, getenv func(string) string, dataDir string) (*Keyring, Source, error) {
	if keyFile != "" {
		keys, err := ReadKeyFile(keyFile)
		if err != nil {
			return nil, "", err
		}
		kr, err := NewKeyring(keys...)
		return kr, FromFile, err
	}
	if v := getenv(EnvKey); v != "" {
		keys, err := ParseKeys([]byte(strings.ReplaceAll(v, ",", "\n")))
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", EnvKey, err)
		}
		kr, err := NewKeyring(keys...)
		return kr, FromEnv, err
	}
	path := filepath.Join(dataDir, "secrets.key")
	keys, err := ReadKeyFile(path)
	if err == nil {
		kr, err := NewKeyring(keys...)
		return kr, FromDataDir, err
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, "", err
	}
	k, err := NewKey()
	if err != nil {
		return nil, "", err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, "", fmt.Errorf("secrets key file: %w", err)
	}
	_, werr := f.WriteString("# berth secrets master key: keep it, or the stored secrets cannot be read\n" + k.Encode() + "\n")
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		_ = os.Remove(path)
		return nil, "", fmt.Errorf("secrets key file: %w", err)
	}
	kr, err := NewKeyring(k)
	return kr, GeneratedHere, err
}

// Keys are the keyring's keys, primary first.
func (kr *Keyring) Keys() []Key { return append([]Key(nil), kr.keys...) }

// KeyFromBase64 reads one key in the key file's form.
func KeyFromBase64(s string) (Key, error) {
	keys, err := ParseKeys([]byte(s))
	if err != nil {
		return Key{}, err
	}
	if len(keys) != 1 {
		return Key{}, errdefs.Invalid("want exactly one key")
	}
	return keys[0], nil
}
