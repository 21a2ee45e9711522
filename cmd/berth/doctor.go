package main

import (
	"fmt"

	"github.com/berth-sh/berth/api"

	"github.com/spf13/cobra"
)

func newDoctorCmd(g *globals) *cobra.Command {
	var fix bool
	cmd := &cobra.Command{
		Use:   "doctor [--fix]",
		Short: "Find orphans and leaks and check the runtime",
		Long: `Look for what sandboxes left behind (mounts, cgroups, runtime state,
directories, processes, records without a sandbox) and check the runtime.
With --fix, reclaim what was found. Exits 1 while anything is left unhealthy.`,
		Args: cobra.NoArgs,
	}
	out := addOutputFlag(cmd)
	cmd.Flags().BoolVar(&fix, "fix", false, "reclaim the orphans and leaks found")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		rep, err := c.Doctor(cmd.Context(), fix)
		if err != nil {
			return err
		}
		w := cmd.OutOrStdout()
		if out.json() {
			if err := printJSON(w, rep); err != nil {
				return err
			}
		} else {
			if len(rep.Findings) > 0 {
				tw := newTable(w)
				fmt.Fprintln(tw, "KIND\tSANDBOX\tDETAIL\tFIXED\tERROR")
				for _, f := range rep.Findings {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", f.Kind, orDash(f.ID), f.Detail, yesNo(f.Fixed), f.Error)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			state := "healthy"
			if !rep.Healthy {
				state = "unhealthy"
			}
			fmt.Fprintf(w, "runtime %s: %s, %d finding(s)\n", orDash(rep.Runtime), state, len(rep.Findings))
			for _, l := range rep.Leases {
				fmt.Fprintln(termSafe{w}, leaseLine(l)) // holder names are the store's, not this daemon's
			}
		}
		if rep.Healthy {
			return nil
		}
		unfixed := 0
		for _, f := range rep.Findings {
			if !f.Fixed {
				unfixed++
			}
		}
		if fix && unfixed == 0 {
			return nil
		}
		if !fix {
			return fmt.Errorf("unhealthy: %d problem(s) found; run 'berth doctor --fix' to reclaim them", len(rep.Findings))
		}
		return fmt.Errorf("unhealthy: %d problem(s) could not be fixed; see the ERROR column", unfixed)
	}
	return cmd
}

// leaseLine says who runs a lease's background work (berth_reconcile_leader).
func leaseLine(l api.DoctorLease) string {
	switch {
	case l.Trivial:
		return fmt.Sprintf("lease %s: this daemon's alone", l.Name)
	case l.Held:
		return fmt.Sprintf("lease %s: held by this replica %s (epoch %d, %.1fs left)", l.Name, l.Self, l.Epoch, float64(l.RemainingMillis)/1000)
	case l.Error != "":
		return fmt.Sprintf("lease %s: not held by this replica %s; store unreachable: %s", l.Name, l.Self, l.Error)
	default:
		return fmt.Sprintf("lease %s: held by %s (epoch %d), not this replica %s", l.Name, orDash(l.Holder), l.Epoch, l.Self)
	}
}
