package daemon

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/node/local/egress"
	"github.com/berth-sh/berth/internal/secrets"
	"github.com/berth-sh/berth/internal/secrets/vault"
	"github.com/berth-sh/berth/internal/server"
	"github.com/berth-sh/berth/internal/store"
)

// openSecrets loads the secrets master keyring and makes the vault the
// API serves. Key ids are logged; keys never are.
func openSecrets(cfg Config, st store.Store, log *slog.Logger) (server.SecretsConfig, error) {
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
	return server.SecretsConfig{Vault: vault.New(st, kr), KeyFile: keyFile}, nil
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
