package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/secrets"
)

func newSecretCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "secret",
		Aliases: []string{"secrets"},
		Short:   "Manage secrets: per-tenant values sealed at rest",
		Long: `Manage secrets: per-tenant values the daemon keeps sealed (AES-256-GCM under a
data key of their own, wrapped by the daemon's master key). No command, route,
log or event ever shows a value: 'ls' lists names and times.

A sandbox gets them with 'berth create --secret NAME[=env:VAR]' (an env var of
every exec) or '--secret NAME=file:/run/secrets/F' (a file 0400 of the
sandbox's user on a tmpfs, written at every start, never on its disk). 'set'
of a new value and 'rm' also rewrite or remove the file in running sandboxes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newSecretSetCmd(g), newSecretLsCmd(g), newSecretRmCmd(g), newSecretRotateCmd(g))
	return cmd
}

func newSecretSetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "set NAME",
		Short:   "Set a secret from stdin (never from argv: it would show in ps)",
		Example: "  printf %s \"$TOKEN\" | berth secret set GH_TOKEN",
		Args:    exactArgs(1, "a secret name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := secrets.CheckName(args[0]); err != nil {
				return err
			}
			v, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), secrets.MaxValue+1))
			if err != nil {
				return fmt.Errorf("reading the value from stdin: %w", err)
			}
			if len(v) > secrets.MaxValue {
				return fmt.Errorf("the value is larger than %d bytes", secrets.MaxValue)
			}
			if len(v) == 0 {
				return fmt.Errorf("no value on stdin")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			s, err := c.SetSecret(cmd.Context(), args[0], string(v))
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), s.Name)
			return err
		},
	}
}

func newSecretLsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List secrets (names and times, never values)",
		Args:    cobra.NoArgs,
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		list, err := c.ListSecrets(cmd.Context())
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), list)
		}
		now := time.Now()
		tw := newTable(cmd.OutOrStdout())
		fmt.Fprintln(tw, "NAME\tKEY\tCREATED\tUPDATED")
		for _, s := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.KeyID, age(now, s.CreatedAt), age(now, s.UpdatedAt))
		}
		return tw.Flush()
	}
	return cmd
}

func newSecretRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"remove", "delete"},
		Short:   "Remove secrets: new execs and starts no longer get them; their files go from running sandboxes",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			for _, n := range args {
				if err := c.DeleteSecret(cmd.Context(), n); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), n)
			}
			return nil
		},
	}
}

func newSecretRotateCmd(g *globals) *cobra.Command {
	var keyFile string
	cmd := &cobra.Command{
		Use:   "rotate-key --new-key-file FILE",
		Short: "Rotate the daemon's master key, re-wrapping every secret while it serves (admin)",
		Long: `Rotate the daemon's secrets master key: FILE holds the new key (one line, the
standard base64 of 32 random bytes, e.g. 'head -c32 /dev/urandom | base64'; mode
0600). The daemon holds the new and the old key while it re-wraps every secret's
data key under the new one (values are never decrypted for it), writing both to
its key file first, then keeps only the new key. With BERTH_SECRETS_KEY instead
of a key file, set it to the new key before the daemon's next start.`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&keyFile, "new-key-file", "", "file holding the new master key")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if keyFile == "" {
			return fmt.Errorf("--new-key-file is required")
		}
		keys, err := secrets.ReadKeyFile(keyFile)
		if err != nil {
			return err
		}
		if len(keys) != 1 {
			return fmt.Errorf("%s: want exactly one key", keyFile)
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		r, err := c.RotateSecretsKey(cmd.Context(), keys[0].Encode())
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "master key %s: %d secrets re-wrapped; removed %s\n", r.KeyID, r.Rewrapped, orDash(strings.Join(r.Removed, ",")))
		if r.KeyFile == "" {
			fmt.Fprintln(os.Stderr, "the daemon's keys come from BERTH_SECRETS_KEY: set it to the new key before its next start")
		}
		return nil
	}
	return cmd
}

// parseSecretFlags reads --secret values: env vars of every exec, files
// on the sandbox's /run/secrets tmpfs, or egress: references (the env var
// NAME holds a placeholder the egress proxy replaces for HOST).
func parseSecretFlags(vals []string) ([]api.SecretRef, error) {
	var out []api.SecretRef
	for _, v := range vals {
		r, err := secrets.ParseRef(v)
		if err != nil {
			return nil, fmt.Errorf("--secret %s", errdefs.Message(err))
		}
		switch r.Kind {
		case secrets.Env:
			out = append(out, api.SecretRef{Name: r.Name, Env: r.Target})
		case secrets.File:
			out = append(out, api.SecretRef{Name: r.Name, File: r.Target})
		case secrets.Egress:
			out = append(out, api.SecretRef{Name: r.Name, EgressHost: r.Target})
		default:
			return nil, fmt.Errorf("--secret %s: %s: injection is not served by this berth; use NAME[=env:VAR], NAME=file:%s/NAME or NAME=egress:HOST", r.Name, r.Kind, secrets.FileDir)
		}
	}
	return out, nil
}
