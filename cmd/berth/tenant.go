package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func newTenantCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "tenant",
		Aliases: []string{"tenants"},
		Short:   "Manage tenants (host administrator)",
		Long: `Manage tenants. A tenant owns its sandboxes, volumes, snapshots, keys and
leases: another tenant's key gets 404 naming them, and names are unique per
tenant. The unix socket and the bootstrap key are the host's administrator,
above tenants. Make a tenant's keys with 'berth key create --tenant NAME'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	create := &cobra.Command{Use: "create NAME", Short: "Create a tenant", Args: exactArgs(1, "a tenant name")}
	create.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		t, err := c.CreateTenant(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), t.Name)
		return err
	}
	ls := &cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: "List tenants", Args: cobra.NoArgs}
	out := addOutputFlag(ls)
	ls.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		ts, err := c.ListTenants(cmd.Context())
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), ts)
		}
		tw := newTable(cmd.OutOrStdout())
		fmt.Fprintln(tw, "NAME\tAGE")
		for _, t := range ts {
			fmt.Fprintf(tw, "%s\t%s\n", t.Name, age(time.Now(), t.CreatedAt))
		}
		return tw.Flush()
	}
	rm := &cobra.Command{Use: "rm NAME", Aliases: []string{"delete"},
		Short: "Delete a tenant that owns no live sandbox, volume or snapshot; its keys are revoked",
		Args:  exactArgs(1, "a tenant name")}
	rm.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		return c.DeleteTenant(cmd.Context(), args[0])
	}
	cmd.AddCommand(create, ls, rm)
	return cmd
}
