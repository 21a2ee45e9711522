package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

func newAuditCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Read, export and verify the tamper-evident audit log",
		Long: `Every mutating API call and every action the daemon takes on its own
(policy pause/stop/delete, reconciler cleanup, doctor fixes) is recorded
before it takes effect and completed with its outcome, in one hash chain per
tenant sealed with HMAC-SHA256 under <data-dir>/audit.key. An entry whose
outcome was never recorded (the daemon died meanwhile) shows "pending".`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newAuditLsCmd(g), newAuditExportCmd(g), newAuditVerifyCmd(g))
	return cmd
}

func newAuditLsCmd(g *globals) *cobra.Command {
	var (
		f            client.AuditFilter
		since, until string
	)
	cmd := &cobra.Command{
		Use:   "ls [--since T] [--until T] [--actor A] [--action A] [--target T]",
		Short: "List audited actions, oldest first",
		Long: `List audited actions, oldest first. --since and --until take an RFC 3339
time (2026-01-02T15:04:05Z) or a duration back from now (1h, 30m).`,
		Args: cobra.NoArgs,
	}
	out := addOutputFlag(cmd)
	fl := cmd.Flags()
	fl.StringVar(&since, "since", "", "entries that began at or after this time or this long ago")
	fl.StringVar(&until, "until", "", "entries that began before this time or this long ago")
	fl.StringVar(&f.Actor, "actor", "", `only this actor ("local", "key:<id>", "lease:<sandbox>", "system:<component>")`)
	fl.StringVar(&f.Action, "action", "", `only this action (a route, e.g. "POST /v1/sandboxes", or "policy.stop")`)
	fl.StringVar(&f.Target, "target", "", "only this target (a sandbox id, a volume or template name)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		var err error
		if f.Since, err = auditTime("since", since); err != nil {
			return err
		}
		if f.Until, err = auditTime("until", until); err != nil {
			return err
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		es, err := c.ListAudit(cmd.Context(), f)
		if err != nil {
			return err
		}
		w := cmd.OutOrStdout()
		if out.json() {
			return printJSON(w, es)
		}
		tw := newTable(w)
		fmt.Fprintln(tw, "TIME\tTENANT\tSEQ\tACTOR\tACTION\tTARGET\tRESULT\tREQUEST")
		for _, e := range es {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", e.Time.Format(time.RFC3339), orDash(e.Tenant), e.Seq, e.Actor,
				e.Action, orDash(e.Target), e.Result, orDash(e.RequestID))
		}
		return tw.Flush()
	}
	return cmd
}

// auditTime reads an RFC 3339 time or a duration back from now.
func auditTime(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return time.Now().Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--%s %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration (1h)", name, v)
}

func newAuditExportCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "export > audit.jsonl",
		Short: "Write every sealed audit record as JSON lines",
		Long: `Write every sealed audit record (begins and outcomes, with their prev_hash
and hash) as JSON lines, by tenant then seq, to standard output.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			return c.ExportAudit(cmd.Context(), cmd.OutOrStdout())
		},
	}
}

func newAuditVerifyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check the audit chains; exit 1 naming the first bad record",
		Long: `Have the daemon check every audit chain: numbered without gaps, each record
linked to the one before and sealed under the daemon's audit key, each chain
ending at its head. Exits 1, naming the first bad record, when one is not.

The database alone cannot show a chain whose last records were deleted and
whose head row was rewound to match. With --anchor FILE (an anchor the
daemon wrote: serve --audit-anchor-file, by default beside the data dir) the
daemon also checks the anchor's signature with its own key and that every
chain still holds the head the anchor recorded: a chain cut below it fails.`,
		Args: cobra.NoArgs,
	}
	out := addOutputFlag(cmd)
	anchor := cmd.Flags().String("anchor", "", "an audit anchor file the daemon wrote: chains cut below its heads fail")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		var v *api.AuditVerify
		if *anchor != "" {
			b, rerr := os.ReadFile(*anchor)
			if rerr != nil {
				return rerr
			}
			v, err = c.VerifyAuditAnchor(cmd.Context(), b)
		} else {
			v, err = c.VerifyAudit(cmd.Context())
		}
		if err != nil {
			return err
		}
		w := cmd.OutOrStdout()
		if out.json() {
			if err := printJSON(w, v); err != nil {
				return err
			}
		} else if v.OK {
			fmt.Fprintf(w, "audit log intact: %d record(s) checked, %d pending\n", v.Checked, v.Pending)
		}
		if v.OK {
			return nil
		}
		if v.Bad == nil {
			return fmt.Errorf("audit log verification failed")
		}
		return fmt.Errorf("audit log tampered: tenant %q record %d: %s", v.Bad.Tenant, v.Bad.Seq, v.Bad.Reason)
	}
	return cmd
}
