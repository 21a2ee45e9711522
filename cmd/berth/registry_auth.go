package main

import (
	"bufio"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
)

// registryAuthFlags give one import or push its own registry account
// (never stored by the daemon). The password comes from stdin, never the
// command line.
type registryAuthFlags struct {
	user     string
	pwStdin  bool
	tokStdin bool
}

func (f *registryAuthFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.user, "registry-user", "", "registry `USER` for this transfer alone, with --registry-password-stdin (default: the daemon's credentials for the host; none for a tenant key)")
	cmd.Flags().BoolVar(&f.pwStdin, "registry-password-stdin", false, "read the --registry-user password from stdin (one line)")
	cmd.Flags().BoolVar(&f.tokStdin, "registry-token-stdin", false, "read a registry bearer token for this transfer from stdin (one line)")
}

// auth reads the account the flags ask for (nil: none).
func (f *registryAuthFlags) auth(cmd *cobra.Command) (*api.RegistryAuth, error) {
	if f.pwStdin && f.tokStdin {
		return nil, fmt.Errorf("give --registry-password-stdin or --registry-token-stdin, not both")
	}
	if f.pwStdin != (f.user != "") {
		return nil, fmt.Errorf("--registry-user and --registry-password-stdin go together")
	}
	if !f.pwStdin && !f.tokStdin {
		return nil, nil
	}
	line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	if err != nil && line == "" {
		return nil, fmt.Errorf("reading the registry secret from stdin: %w", err)
	}
	secret := strings.TrimRight(line, "\r\n")
	if secret == "" {
		return nil, fmt.Errorf("the registry secret on stdin is empty")
	}
	if f.tokStdin {
		return &api.RegistryAuth{Token: secret}, nil
	}
	return &api.RegistryAuth{Username: f.user, Password: secret}, nil
}
