package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/internal/keyfile"
)

// newInstallKeysCmd copies the shared key files of a Kubernetes Secret
// volume into the data dir, each 0600 (keyfile.Install): the Helm chart's
// init container, so that serve's --token-key-file, --audit-key-file and
// --secrets-key-file read files their owner's alone although the kubelet
// makes a Secret volume group-readable under the pod's fsGroup.
func newInstallKeysCmd() *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:    "install-keys --from DIR --to DIR",
		Short:  "Copy key files from a Secret volume into DIR, mode 0600 (the chart's init container)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			names, err := keyfile.Install(from, to)
			if err != nil {
				return fmt.Errorf("install-keys: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "installed %d key files into %s: %v\n", len(names), to, names)
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "/keys", "the Secret volume's `DIR`")
	cmd.Flags().StringVar(&to, "to", "/var/lib/berth/keys", "where the 0600 copies go (`DIR`, made 0700)")
	return cmd
}
