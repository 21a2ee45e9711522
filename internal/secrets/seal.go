package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"fmt"

	"github.com/berth-sh/berth/internal/errdefs"
)

// MaxValue bounds a secret's value (a PEM bundle fits; a file does not).
const MaxValue = 64 << 10

// Sealed is a value as stored: never the value itself.
type Sealed struct {
	Ciphertext []byte // the value under the data key (GCM, tag appended)
	Nonce      []byte // the value's nonce
	WrappedKey []byte // nonce || the data key under the master key
	KeyID      string // the master key that wrapped the data key
}

// AAD binds a sealed value to its tenant and secret name.
func AAD(tenant, name string) []byte {
	return []byte("berth secret\x00" + tenant + "\x00" + name)
}

func gcm(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// Seal encrypts value for (tenant, name) under a new data key wrapped by
// the keyring's primary key.
func (kr *Keyring) Seal(tenant, name string, value []byte) (Sealed, error) {
	if len(value) > MaxValue {
		return Sealed{}, errdefs.TooLarge("secret value is %d bytes, more than %d", len(value), MaxValue)
	}
	dk := make([]byte, KeySize)
	if _, err := rand.Read(dk); err != nil {
		return Sealed{}, err
	}
	defer clear(dk)
	a, err := gcm(dk)
	if err != nil {
		return Sealed{}, err
	}
	nonce := make([]byte, a.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return Sealed{}, err
	}
	s := Sealed{Ciphertext: a.Seal(nil, nonce, value, AAD(tenant, name)), Nonce: nonce}
	if s.WrappedKey, s.KeyID, err = kr.wrap(dk); err != nil {
		return Sealed{}, err
	}
	return s, nil
}

// Open decrypts s for (tenant, name). A key id the keyring lacks, or
// bytes that do not authenticate, are errors that name neither the value
// nor a key.
func (kr *Keyring) Open(tenant, name string, s Sealed) ([]byte, error) {
	dk, err := kr.unwrap(s)
	if err != nil {
		return nil, err
	}
	defer clear(dk)
	a, err := gcm(dk)
	if err != nil {
		return nil, err
	}
	if len(s.Nonce) != a.NonceSize() {
		return nil, fmt.Errorf("secret %q: stored nonce is malformed", name)
	}
	v, err := a.Open(nil, s.Nonce, s.Ciphertext, AAD(tenant, name))
	if err != nil {
		return nil, fmt.Errorf("secret %q: stored value does not authenticate", name)
	}
	return v, nil
}

// Rewrap returns s with its data key wrapped under the primary key, and
// whether that changed anything. The value's ciphertext is kept as is.
func (kr *Keyring) Rewrap(s Sealed) (Sealed, bool, error) {
	if s.KeyID == kr.Primary().ID {
		return s, false, nil
	}
	dk, err := kr.unwrap(s)
	if err != nil {
		return s, false, err
	}
	defer clear(dk)
	out := s
	if out.WrappedKey, out.KeyID, err = kr.wrap(dk); err != nil {
		return s, false, err
	}
	return out, true, nil
}

func (kr *Keyring) wrap(dk []byte) ([]byte, string, error) {
	k := kr.Primary()
	a, err := gcm(k.raw[:])
	if err != nil {
		return nil, "", err
	}
	nonce := make([]byte, a.NonceSize(), a.NonceSize()+len(dk)+a.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, "", err
	}
	return a.Seal(nonce, nonce, dk, []byte("berth data key\x00"+k.ID)), k.ID, nil
}

func (kr *Keyring) unwrap(s Sealed) ([]byte, error) {
	k := kr.find(s.KeyID)
	if k == nil {
		return nil, errdefs.Unavailable("secret's data key is wrapped by master key %s, which this daemon does not hold (--secrets-key-file)", s.KeyID)
	}
	a, err := gcm(k.raw[:])
	if err != nil {
		return nil, err
	}
	if len(s.WrappedKey) < a.NonceSize() {
		return nil, fmt.Errorf("secret's wrapped data key is malformed")
	}
	dk, err := a.Open(nil, s.WrappedKey[:a.NonceSize()], s.WrappedKey[a.NonceSize():], []byte("berth data key\x00"+k.ID))
	if err != nil || len(dk) != KeySize {
		return nil, fmt.Errorf("secret's wrapped data key does not authenticate under master key %s", k.ID)
	}
	return dk, nil
}
