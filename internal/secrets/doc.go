// Package secrets is the pure half of berth's per-tenant secrets: the
// master keyring and envelope encryption of values at rest, the parser of
// secret references (`NAME[=env:VAR|file:/path|egress:HOST]`), and the
// placeholders and their substitution for egress-injected secrets. It does
// no I/O beyond reading or creating the key file (keyring.go) and imports
// nothing of the store, the engine or the server.
//
// Envelope encryption: every value is sealed with AES-256-GCM under a data
// key of its own (32 random bytes), and that data key is sealed — wrapped —
// with AES-256-GCM under a master key of the keyring. A stored secret is the
// value's ciphertext and nonce, the wrapped data key and the id of the
// master key that wrapped it. The value's additional data binds it to its
// tenant and name, so a row copied under another name or tenant does not
// open. Rotating the master key re-wraps data keys only (Rewrap): values are
// never decrypted for it, and a daemon holding both keys opens both forms
// while the re-wrap runs.
//
// The keyring's first key encrypts; every key decrypts. Key ids are a
// truncated SHA-256 of the key under a fixed label: they name a key without
// revealing it.
package secrets
