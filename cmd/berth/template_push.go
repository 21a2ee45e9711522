package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
)

func newTemplatePushCmd(g *globals) *cobra.Command {
	var insecure bool
	cmd := &cobra.Command{
		Use:   "push NAME REF",
		Short: "Push a template to a registry as an OCI image",
		Long: `Push a template to a registry as an OCI image. The daemon writes it, with
its CAs (serve --registry-certs) and the account --registry-user gives, else
the daemon's credentials (serve --registry-auth; a tenant key gets none):
each layer as berth serializes it (gzip), the template's env, workdir, user,
entrypoint, cmd, ports, stop signal and labels as the image config. Blobs the
registry has already are not sent again. A template on the host's /usr (the
builtin base and templates built on it) cannot be pushed. Tenant keys push
only when the daemon runs with --tenant-pulls.`,
		Example: `  berth template push py-deps registry.local:5000/team/py-deps:1
  berth template import py-deps-copy registry.local:5000/team/py-deps:1
  echo "$PW" | berth template push app ghcr.io/team/app:1 --registry-user bot --registry-password-stdin`,
		Args: exactArgs(2, "a template name and a registry reference"),
	}
	out := addOutputFlag(cmd)
	cmd.Flags().BoolVar(&insecure, "insecure", false, "allow a plain-HTTP registry")
	var regAuth registryAuthFlags
	regAuth.register(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ra, err := regAuth.auth(cmd)
		if err != nil {
			return err
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		prog := newImportProgress(cmd.ErrOrStderr())
		prog.cachedText = "already in the registry"
		res, err := c.PushTemplateProgress(cmd.Context(), args[0], api.PushTemplateRequest{Ref: args[1], Insecure: insecure, RegistryAuth: ra}, prog.report)
		prog.finish()
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), res)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "pushed %s@%s\n", res.Ref, res.Digest)
		return nil
	}
	return cmd
}
