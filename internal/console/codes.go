package console

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"strings"
	"sync"
	"time"
)

// CodeTTL is how long a sign-in code of `berth console` may wait for its
// exchange; MaxCodes how many may wait at once (the oldest go first).
const (
	CodeTTL  = 2 * time.Minute
	MaxCodes = 16
)

// CodePrefix starts every sign-in code, so a leaked one is recognisable
// (and never mistaken for an API key).
const CodePrefix = "berth_signin_"

// Codes holds the outstanding one-time sign-in codes, in memory only: a
// daemon restart forgets them, which only costs a new `berth console`.
// Only each code's SHA-256 is kept, so the table itself opens nothing.
type Codes struct {
	mu    sync.Mutex
	codes map[[32]byte]time.Time // hash → expiry
}

// NewCodes returns an empty table.
func NewCodes() *Codes { return &Codes{codes: map[[32]byte]time.Time{}} }

// Mint makes a new code valid until now+CodeTTL.
func (c *Codes) Mint(now time.Time) (code string, expires time.Time) {
	b := make([]byte, 32)
	rand.Read(b)
	code = CodePrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
	expires = now.Add(CodeTTL)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweep(now)
	for len(c.codes) >= MaxCodes {
		var oldest [32]byte
		var at time.Time
		for h, e := range c.codes {
			if at.IsZero() || e.Before(at) {
				oldest, at = h, e
			}
		}
		delete(c.codes, oldest)
	}
	c.codes[sha256.Sum256([]byte(code))] = expires
	return code, expires
}

// Redeem reports whether code is outstanding and unexpired at now, and
// spends it either way: a code opens at most one session, and a code
// presented after its expiry is gone too.
func (c *Codes) Redeem(code string, now time.Time) bool {
	if !strings.HasPrefix(code, CodePrefix) || len(code) > 128 {
		return false
	}
	h := sha256.Sum256([]byte(code))
	c.mu.Lock()
	defer c.mu.Unlock()
	exp, ok := c.codes[h]
	delete(c.codes, h)
	c.sweep(now)
	return ok && now.Before(exp)
}

// Outstanding is how many codes wait (for tests and leak checks).
func (c *Codes) Outstanding() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.codes)
}

func (c *Codes) sweep(now time.Time) {
	for h, e := range c.codes {
		if !now.Before(e) {
			delete(c.codes, h)
		}
	}
}
