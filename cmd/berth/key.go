package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
)

func newKeyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "key",
		Aliases: []string{"keys"},
		Short:   "Manage API keys",
		Long: `Manage API keys. A key belongs to a tenant and has a role — viewer (reads),
member (sandboxes, exec, files, ports, network, templates) or admin (all of its
tenant's, keys, secrets and audit included) — optionally narrowed to some of
the role's scopes, and optionally an expiry. The key is printed once; only its
hash is kept. Name a key by its prefix (berth_ and its id) to revoke it:
revocation takes effect on its next request, and the leases it minted end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var (
		tenant, role, name string
		scopes             []string
		expires            time.Duration
	)
	create := &cobra.Command{
		Use:     "create --tenant T --role R [--scope S]... [--expires D]",
		Short:   "Create an API key and print it (once)",
		Example: "  berth key create --tenant acme --role member\n  berth key create --tenant acme --role admin --scope keys --expires 720h",
		Args:    cobra.NoArgs,
	}
	out := addOutputFlag(create)
	f := create.Flags()
	f.StringVar(&tenant, "tenant", "", "the key's tenant (a tenant's own key: its own, the default)")
	f.StringVar(&role, "role", "", "viewer, member or admin")
	f.StringArrayVar(&scopes, "scope", nil, "narrow the role to this scope (repeatable)")
	f.DurationVar(&expires, "expires", 0, "lifetime, e.g. 24h (default: none)")
	f.StringVar(&name, "name", "", "a label for the key")
	create.RunE = func(cmd *cobra.Command, _ []string) error {
		if role == "" {
			return fmt.Errorf("--role is required: viewer, member or admin")
		}
		if expires < 0 || expires%time.Second != 0 {
			return fmt.Errorf("--expires must be a positive whole number of seconds")
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		k, err := c.CreateAPIKey(cmd.Context(), api.CreateAPIKeyRequest{Name: name, Tenant: tenant, Role: role, Scopes: scopes,
			ExpiresInSeconds: int64(expires / time.Second)})
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), k)
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), k.Key)
		return err
	}
	ls := &cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: "List API keys (never their secrets)", Args: cobra.NoArgs}
	lsOut := addOutputFlag(ls)
	ls.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		ks, err := c.ListAPIKeys(cmd.Context())
		if err != nil {
			return err
		}
		if lsOut.json() {
			return printJSON(cmd.OutOrStdout(), ks)
		}
		now := time.Now()
		tw := newTable(cmd.OutOrStdout())
		fmt.Fprintln(tw, "PREFIX\tTENANT\tROLE\tSCOPES\tNAME\tEXPIRES\tREVOKED\tAGE")
		for _, k := range ks {
			exp, rev := "-", "-"
			if k.ExpiresAt != nil {
				exp = k.ExpiresAt.UTC().Format(time.RFC3339)
			}
			if k.RevokedAt != nil {
				rev = age(now, *k.RevokedAt) + " ago"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.Prefix, orDash(k.Tenant), orDash(k.Role),
				strings.Join(k.Scopes, ","), orDash(k.Name), exp, rev, age(now, k.CreatedAt))
		}
		return tw.Flush()
	}
	revoke := &cobra.Command{Use: "revoke PREFIX", Short: "Revoke an API key and the leases it minted",
		Args: exactArgs(1, "a key prefix")}
	revoke.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		k, err := c.RevokeAPIKey(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), k.Prefix)
		return err
	}
	cmd.AddCommand(create, ls, revoke)
	return cmd
}
