package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
)

// newLeaseCmd mints a lease token: POST /v1/sandboxes/{id}/leases.
func newLeaseCmd(g *globals) *cobra.Command {
	var scopes []string
	var ttl time.Duration
	var revoke string
	cmd := &cobra.Command{
		Use:   "lease ID [--scope exec|files|ports]... [--ttl D] | lease ID --revoke LEASE",
		Short: "Mint a lease token acting on one sandbox only (printed once)",
		Long: `A lease token acts on one sandbox only: it reads the sandbox and its events,
and with its scopes runs commands (exec), reads and writes files (files) and
reaches its ports (ports). It ends at --ttl (default 1h), or when the sandbox
stops, is quarantined or deleted. Hand it to code that should touch this
sandbox and nothing else. The token is printed once.

--revoke LEASE ends one lease (its id, from --output json; the create-time
lease's is c-<sandbox id>) at once: refused from its next request, its
connections closed; its key and other leases live on.`,
		Example: `  berth lease $id --scope exec --scope files --ttl 30m
  berth lease $id --revoke l-0123456789abcdef01234567`,
		Args: exactArgs(1, "a sandbox id or name"),
	}
	out := addOutputFlag(cmd)
	cmd.Flags().StringSliceVar(&scopes, "scope", nil, "what the lease may do beyond reading: exec, files, ports (repeatable; default: all three)")
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "lifetime (default 1h)")
	cmd.Flags().StringVar(&revoke, "revoke", "", "revoke the lease with this id instead of minting one")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if ttl < 0 {
			return fmt.Errorf("invalid --ttl %s: must not be negative", ttl)
		}
		if revoke != "" && (len(scopes) > 0 || ttl != 0) {
			return fmt.Errorf("--revoke takes no --scope or --ttl")
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		if revoke != "" {
			if err := c.RevokeLease(cmd.Context(), args[0], revoke); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), revoke)
			return nil
		}
		l, err := c.CreateLease(cmd.Context(), args[0], api.CreateLeaseRequest{Scopes: scopes, TTLSeconds: int64(ttl / time.Second)})
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), l)
		}
		fmt.Fprintln(cmd.OutOrStdout(), l.Token)
		return nil
	}
	return cmd
}

// newPortTokenCmd mints a browser link to one port:
// POST /v1/sandboxes/{id}/ports/{port}/token.
func newPortTokenCmd(g *globals) *cobra.Command {
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "port-token ID PORT [--ttl D]",
		Short: "Mint a link that opens one port of a sandbox in a browser (printed once)",
		Long: `Prints a URL path (relative to the daemon's address) carrying a token for one
port of one sandbox: opened in a browser it becomes a cookie for that port
alone. It ends at --ttl (default 1h).`,
		Example: `  echo "https://berth.example:8443$(berth port-token $id 8000)"`,
		Args:    exactArgs(2, "a sandbox id or name and a port"),
	}
	out := addOutputFlag(cmd)
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "lifetime (default 1h)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		port, err := strconv.Atoi(args[1])
		if err != nil || port < 1 || port > 65535 {
			return fmt.Errorf("invalid port %q: want 1-65535", args[1])
		}
		if ttl < 0 {
			return fmt.Errorf("invalid --ttl %s: must not be negative", ttl)
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		pt, err := c.CreatePortToken(cmd.Context(), args[0], port, api.CreatePortTokenRequest{TTLSeconds: int64(ttl / time.Second)})
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), pt)
		}
		fmt.Fprintln(cmd.OutOrStdout(), pt.URL)
		return nil
	}
	return cmd
}
