package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
)

func newNetworkCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "network",
		Short: "Show and change a sandbox's egress rules (network mode egress)",
		Long: `A sandbox in network mode egress reaches only what its rules allow; everything
else is dropped, and names resolve only through berth's resolver, which answers
allowed names and pins their addresses for the record's TTL. Rules take effect
at once, without a restart. A rule is [tcp://|udp://]TARGET[:PORT[,PORT...]]
with TARGET an IP, a CIDR, a domain or *.domain.`,
	}
	out := func(c *cobra.Command, o *outputValue, nr *api.NetworkRules) error {
		if o.json() {
			return printJSON(c.OutOrStdout(), nr)
		}
		w := c.OutOrStdout()
		fmt.Fprintf(w, "mode: %s\n", nr.Mode)
		if nr.IPv4 != "" {
			fmt.Fprintf(w, "addresses: %s %s\n", nr.IPv4, nr.IPv6)
		}
		fmt.Fprintf(w, "allow: %s\n", strings.Join(nr.Allow, ", "))
		return nil
	}
	ls := &cobra.Command{Use: "ls ID", Short: "Show a sandbox's network mode, addresses and rules", Args: cobra.ExactArgs(1)}
	lsOut := addOutputFlag(ls)
	ls.RunE = func(c *cobra.Command, args []string) error {
		cl, err := g.client()
		if err != nil {
			return err
		}
		defer cl.Close()
		nr, err := cl.Network(c.Context(), args[0])
		if err != nil {
			return err
		}
		return out(c, lsOut, nr)
	}
	change := func(verb string) *cobra.Command {
		sc := &cobra.Command{Use: verb + " ID RULE...", Short: verb + " egress rules, effective at once", Args: cobra.MinimumNArgs(2)}
		o := addOutputFlag(sc)
		sc.RunE = func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			req := api.NetworkRulesRequest{}
			if verb == "allow" {
				req.Allow = args[1:]
			} else {
				req.Deny = args[1:]
			}
			nr, err := cl.UpdateNetwork(c.Context(), args[0], req)
			if err != nil {
				return err
			}
			return out(c, o, nr)
		}
		return sc
	}
	cmd.AddCommand(ls, change("allow"), change("deny"))
	return cmd
}

func newFlowsCmd(g *globals) *cobra.Command {
	var after uint64
	cmd := &cobra.Command{Use: "flows ID", Short: "Show a sandbox's flow log: connection attempts and DNS queries, allowed and denied", Args: cobra.ExactArgs(1)}
	o := addOutputFlag(cmd)
	cmd.Flags().Uint64Var(&after, "after", 0, "only flows after this sequence number")
	cmd.RunE = func(c *cobra.Command, args []string) error {
		cl, err := g.client()
		if err != nil {
			return err
		}
		defer cl.Close()
		fs, err := cl.Flows(c.Context(), args[0], after)
		if err != nil {
			return err
		}
		if o.json() {
			return printJSON(c.OutOrStdout(), fs)
		}
		tw := table{tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 3, ' ', 0)}
		fmt.Fprintln(tw, "SEQ\tTIME\tKIND\tPROTO\tDESTINATION\tNAME\tDECISION\tRULE")
		for _, f := range fs {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.Seq, f.Time.Format("15:04:05.000"), f.Kind, f.Proto, f.Dst, dash(f.Name), f.Decision, dash(f.Rule))
		}
		return tw.Flush()
	}
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
