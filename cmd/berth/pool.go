package main

import (
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
)

func newPoolCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "pool",
		Aliases: []string{"pools"},
		Short:   "Show warm pools (ready sandboxes kept per template)",
		Long: `A warm pool keeps ready, never-used sandboxes of a template, so that create
hands one out at once (a hit) instead of starting one (a miss). Set a template's
pool with 'berth template pool NAME --min N'.`,
	}
	cmd.AddCommand(newPoolLsCmd(g))
	return cmd
}

func newPoolLsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List warm pools",
		Args:    cobra.NoArgs,
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		ps, err := c.ListPools(cmd.Context())
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), ps)
		}
		return printPoolTable(cmd.OutOrStdout(), ps)
	}
	return cmd
}

func printPoolTable(w io.Writer, ps []api.Pool) error {
	tw := newTable(w)
	// OWNER is the tenant whose template's pool it is ("-": the host's).
	// REASON says why a pool is below MIN (a refill that failed). MIN
	// "N (auto)": the daemon's automatic pool, sized from recent demand.
	fmt.Fprintln(tw, "TEMPLATE\tOWNER\tMIN\tREADY\tSTARTING\tHITS\tMISSES\tREASON")
	for _, p := range ps {
		min := strconv.Itoa(p.Min)
		if p.Auto {
			min += " (auto)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", p.Template, orDash(p.Tenant), min, p.Ready, p.Starting, p.Hits, p.Misses, orDash(p.Reason))
	}
	return tw.Flush()
}

// poolColumn is the POOL column of 'berth template ls': ready/min, or "-"
// for a template without a pool.
func poolColumn(p *api.Pool) string {
	if p == nil || p.Min <= 0 && p.Ready == 0 && p.Starting == 0 {
		return "-"
	}
	return strconv.Itoa(p.Ready) + "/" + strconv.Itoa(p.Min)
}

func newTemplatePoolCmd(g *globals) *cobra.Command {
	var min int
	var auto bool
	cmd := &cobra.Command{
		Use:   "pool NAME [--min N | --auto]",
		Short: "Show or set a template's warm pool",
		Long: `With --min N, keep N ready sandboxes of template NAME (0 removes the pool);
without it, show the pool. Pool members are created ahead and kept frozen;
create takes one and the pool refills in the background. A claimed sandbox gets a
fresh id, hostname, secrets and tokens, and no member is ever handed out twice.

The default template has a pool without anyone setting one: the daemon sizes it
from recent demand (MIN shows "(auto)"; berth serve --warm-pool). A size set with
--min, 0 included, replaces it; --auto forgets the size and returns to it.`,
		Example: `  berth template pool py --min 4
  berth template pool base --auto
  berth template pool py -o json`,
		Args: exactArgs(1, "a template name"),
	}
	out := addOutputFlag(cmd)
	cmd.Flags().IntVar(&min, "min", 0, "number of ready sandboxes to keep (0 removes the pool)")
	cmd.Flags().BoolVar(&auto, "auto", false, "forget the size set: the default template's pool is sized by the daemon again")
	cmd.MarkFlagsMutuallyExclusive("min", "auto")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		set := cmd.Flags().Changed("min")
		if set && min < 0 {
			return fmt.Errorf("invalid --min %d: must not be negative", min)
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		var p *api.Pool
		switch {
		case auto:
			p, err = c.ClearPool(cmd.Context(), args[0])
		case set:
			p, err = c.SetPool(cmd.Context(), args[0], min)
		default:
			p, err = c.GetPool(cmd.Context(), args[0])
		}
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), p)
		}
		return printPoolTable(cmd.OutOrStdout(), []api.Pool{*p})
	}
	return cmd
}
