package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/berth-sh/berth/client"
)

// The CLI's config file holds saved contexts: a named daemon address with
// the API key and TLS settings that go with it (berth context). It lives
// at $XDG_CONFIG_HOME/berth/config.json (~/.config/berth/config.json), mode
// 0600 in a 0700 directory, and is replaced atomically on every change.
//
// An API key is kept as a path to a key file (api_key_file), or, when
// given on stdin to `berth context add --api-key-stdin`, in the file itself
// (api_key); the CLI never prints either.

const configFileName = "config.json"

// defaultContextName is the context that is no saved context: the flags,
// the environment and the local socket. It cannot be added or removed.
const defaultContextName = "default"

// cliConfig is the config file.
type cliConfig struct {
	// Current is the context used when neither --context nor BERTH_CONTEXT
	// names one; empty for the default.
	Current  string                 `json:"current,omitempty"`
	Contexts map[string]*contextDef `json:"contexts,omitempty"`
}

// contextDef is one saved context.
type contextDef struct {
	Host           string `json:"host"`
	APIKeyFile     string `json:"api_key_file,omitempty"`
	APIKey         string `json:"api_key,omitempty"`
	TLSCA          string `json:"tls_ca,omitempty"`
	TLSFingerprint string `json:"tls_fingerprint,omitempty"`
}

// validContextName accepts [A-Za-z0-9][A-Za-z0-9._-]{0,62}. (By hand, not
// a package-level regexp: every CLI start would pay for compiling it.)
func validContextName(name string) error {
	ok := len(name) > 0 && len(name) <= 63
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '-')
	}
	if !ok {
		return fmt.Errorf("invalid context name %q: want letters, digits, '.', '_' or '-', at most 63, starting with a letter or digit", name)
	}
	return nil
}

// validate checks one context's fields; errors name the field.
func (d *contextDef) validate() error {
	if d.Host == "" {
		return errors.New(`field "host": missing`)
	}
	u, err := url.Parse(d.Host)
	if err != nil {
		return fmt.Errorf(`field "host": invalid %q`, d.Host)
	}
	switch u.Scheme {
	case "unix":
		if u.Path == "" && u.Opaque == "" {
			return fmt.Errorf(`field "host": %q: want unix:///path/to/socket`, d.Host)
		}
	case "http", "https", "tcp":
		if u.Host == "" {
			return fmt.Errorf(`field "host": %q: missing host:port`, d.Host)
		}
	default:
		return fmt.Errorf(`field "host": %q: scheme must be unix, http or https`, d.Host)
	}
	if d.APIKey != "" && d.APIKeyFile != "" {
		return errors.New(`fields "api_key" and "api_key_file": give one, not both`)
	}
	if d.APIKeyFile != "" && !filepath.IsAbs(d.APIKeyFile) {
		return fmt.Errorf(`field "api_key_file": %q is not an absolute path`, d.APIKeyFile)
	}
	if strings.ContainsAny(d.APIKey, "\r\n") {
		return errors.New(`field "api_key": contains a line break`)
	}
	if d.TLSCA != "" && d.TLSFingerprint != "" {
		return errors.New(`fields "tls_ca" and "tls_fingerprint": give one, not both`)
	}
	if d.TLSCA != "" && !filepath.IsAbs(d.TLSCA) {
		return fmt.Errorf(`field "tls_ca": %q is not an absolute path`, d.TLSCA)
	}
	if d.TLSFingerprint != "" {
		if _, err := client.ParseFingerprint(d.TLSFingerprint); err != nil {
			return fmt.Errorf(`field "tls_fingerprint": %w`, err)
		}
	}
	if (d.TLSCA != "" || d.TLSFingerprint != "") && u.Scheme != "https" {
		return errors.New(`fields "tls_ca"/"tls_fingerprint" need an https:// host`)
	}
	return nil
}

// parseConfig reads a config file's contents. Errors say where: the line
// and column of a syntax error, the context and field of a bad value.
func parseConfig(b []byte) (*cliConfig, error) {
	cfg := &cliConfig{}
	if len(bytes.TrimSpace(b)) == 0 {
		return cfg, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		return nil, jsonErrorAt(b, dec, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		line, col := lineCol(b, dec.InputOffset())
		return nil, fmt.Errorf("line %d, column %d: data after the top-level object", line, col)
	}
	names := make([]string, 0, len(cfg.Contexts))
	for name := range cfg.Contexts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := validContextName(name); err != nil {
			return nil, err
		}
		if name == defaultContextName {
			return nil, fmt.Errorf("context %q: the name is reserved for the local daemon", name)
		}
		d := cfg.Contexts[name]
		if d == nil {
			return nil, fmt.Errorf("context %q: null", name)
		}
		if err := d.validate(); err != nil {
			return nil, fmt.Errorf("context %q: %w", name, err)
		}
	}
	if cfg.Current != "" && cfg.Current != defaultContextName {
		if _, ok := cfg.Contexts[cfg.Current]; !ok {
			return nil, fmt.Errorf(`field "current": no context %q`, cfg.Current)
		}
	}
	return cfg, nil
}

// jsonErrorAt turns a decoding error into one that gives line and column.
func jsonErrorAt(b []byte, dec *json.Decoder, err error) error {
	off := dec.InputOffset()
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
		field := te.Field
		if field == "" {
			field = "(top level)"
		}
		line, col := lineCol(b, off)
		return fmt.Errorf("line %d, column %d: field %q: want a %s, not a JSON %s", line, col, field, te.Type, te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		off = int64(len(b))
	}
	line, col := lineCol(b, off)
	return fmt.Errorf("line %d, column %d: %s", line, col, strings.TrimPrefix(err.Error(), "json: "))
}

// lineCol is the 1-based line and column of byte offset off in b.
func lineCol(b []byte, off int64) (int, int) {
	if off > int64(len(b)) {
		off = int64(len(b))
	}
	if off < 0 {
		off = 0
	}
	before := b[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(off) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return line, col
}

// configPath is the config file's path: under $XDG_CONFIG_HOME, else
// ~/.config.
func configPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no config directory: %w", err)
	}
	return filepath.Join(dir, "berth", configFileName), nil
}

// loadConfig reads the config file at path; a missing file is an empty
// config. Errors name the file.
func loadConfig(path string) (*cliConfig, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &cliConfig{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	cfg, err := parseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	// As ssh does with a private key: a stored API key in a file others
	// can read is refused, not used.
	for name, d := range cfg.Contexts {
		if d.APIKey == "" {
			continue
		}
		if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("config %s: holds the API key of context %q but is readable by others (mode %#o): chmod 600 it", path, name, st.Mode().Perm())
		}
		break
	}
	return cfg, nil
}

// saveConfig writes cfg to path atomically (a temporary file in the same
// directory, synced, then renamed over it), mode 0600, its directory made
// 0700 if missing. A reader sees the old file or the new one, never half.
func saveConfig(path string, cfg *cliConfig) error {
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, "."+configFileName+".*")
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	// CreateTemp makes the file 0600 already; the Chmod keeps that true
	// whatever the platform does.
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if _, err := f.Write(b); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
