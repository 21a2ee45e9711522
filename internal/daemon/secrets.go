package daemon

import (
	"log/slog"
	"os"
	"path/filepath"

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
