package daemon

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/node/local/egress"
	"github.com/berth-sh/berth/internal/secrets"
	"github.com/berth-sh/berth/internal/secrets/vault"
	"github.com/berth-sh/berth/internal/server"
	"github.com/berth-sh/berth/internal/store"
)

// openSecrets loads the secrets master keyring and makes the vault the
// API serves. Key ids are logged; keys never are.
func openSecrets(ctx context.Context, cfg Config, st store.Store, log *slog.Logger) (server.SecretsConfig, error) {
	kr, src, err := secrets.Load(cfg.SecretsKeyFile, os.Getenv, cfg.DataDir)
	if err != nil {
		return server.SecretsConfig{}, err
	}
	keyFile := cfg.SecretsKeyFile
	switch src {
	case secrets.FromEnv:
		keyFile = ""
	case secrets.FromDataDir, secrets.GeneratedHere:
		keyFile = filepath.Join(cfg.DataDir, "secrets.key")
	}
	if src == secrets.GeneratedHere {
		log.Warn("generated the secrets master key: back it up, or the stored secrets cannot be read without it", "file", keyFile)
	}
	log.Info("secrets keyring", "source", string(src), "key_ids", kr.IDs())
	if err := checkSecretKeys(ctx, st, kr, keyFile); err != nil {
		return server.SecretsConfig{}, err
	}
	return server.SecretsConfig{Vault: vault.New(st, kr), KeyFile: keyFile}, nil
}

// checkSecretKeys refuses a keyring that lacks a master key the stored
// secrets are sealed under: a daemon started with the wrong key file (or,
// on a shared store, another daemon's generated key) would otherwise serve
// and fail every create that names such a secret, and a rotation would
// find rows it cannot re-wrap. The error names the missing key ids and the
// flag that brings them.
func checkSecretKeys(ctx context.Context, st store.Secrets, kr *secrets.Keyring, keyFile string) error {
	ids, err := st.SecretKeyIDs(ctx)
	if err != nil {
		return err
	}
	var missing []string
	for _, id := range ids {
		if !slices.Contains(kr.IDs(), id) {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	from := "$BERTH_SECRETS_KEY"
	if keyFile != "" {
		from = keyFile
	}
	return fmt.Errorf("the store holds secrets sealed by master key %s, which this daemon's keyring (%s: %s) lacks: "+
		"pass the key file that holds it with --secrets-key-file (one key a line; the first encrypts, all decrypt), "+
		"or $BERTH_SECRETS_KEY", strings.Join(missing, ", "), from, strings.Join(kr.IDs(), ", "))
}

// egressProxyConfig reads --egress-ca-file (added to the system roots)
// and --egress-dns.
func egressProxyConfig(cfg *Config) (*x509.CertPool, []netip.AddrPort, error) {
	var roots *x509.CertPool
	if cfg.EgressCAFile != "" {
		pem, err := os.ReadFile(cfg.EgressCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--egress-ca-file: %w", err)
		}
		if roots, err = x509.SystemCertPool(); err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("--egress-ca-file %s: no PEM certificate in it", cfg.EgressCAFile)
		}
	}
	var dns []netip.AddrPort
	for _, s := range cfg.EgressDNS {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return nil, nil, fmt.Errorf("--egress-dns %q: want ADDR:PORT, e.g. 192.0.2.53:53", s)
		}
		dns = append(dns, ap)
	}
	return roots, dns, nil
}

// egressSecrets is what the egress proxy needs of the daemon: the vault's
// values and an audit record (`egress.inject`, target
// "<sandbox> <secret>@<host>") per connection and secret put in.
func egressSecrets(v *vault.Vault, a *audit.Log) egress.Secrets {
	return egress.Secrets{
		Resolve: v.Resolve,
		Audit: func(ctx context.Context, tenant, sandboxID, secret, host string) {
			a.System(ctx, tenant, "egress", "inject", sandboxID+" "+secret+"@"+host)(nil)
		},
	}
}
