package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
)

func newLsCmd(g *globals) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:     "ls [--all]",
		Aliases: []string{"list", "ps"},
		Short:   "List sandboxes",
		Args:    cobra.NoArgs,
	}
	out := addOutputFlag(cmd)
	cmd.Flags().BoolVarP(&all, "all", "a", false, "include deleted sandboxes (tombstones)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		sbs, err := c.ListSandboxes(cmd.Context(), all)
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), sbs)
		}
		return printSandboxTable(cmd.OutOrStdout(), sbs, time.Now())
	}
	return cmd
}

func printSandboxTable(w io.Writer, sbs []api.Sandbox, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tNAME\tTEMPLATE\tSTATE\tPERSISTENT\tAGE")
	for _, sb := range sbs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", sb.ID, orDash(sb.Name), orDash(sb.Template),
			sb.State, yesNo(sb.Persistent), age(now, sb.CreatedAt))
	}
	return tw.Flush()
}

func newInspectCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inspect ID",
		Short: "Show a sandbox in detail",
		Args:  exactArgs(1, "a sandbox id or name"),
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		sb, err := c.GetSandbox(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), sb)
		}
		return printSandbox(cmd.OutOrStdout(), sb, time.Now())
	}
	return cmd
}

func printSandbox(w io.Writer, sb *api.Sandbox, now time.Time) error {
	tw := newTable(w)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	ts := func(t *time.Time) string {
		if t == nil || t.IsZero() {
			return ""
		}
		return t.Local().Format(time.RFC3339) + " (" + relTime(now, *t) + ")"
	}
	row("ID", sb.ID)
	row("Name", orDash(sb.Name))
	row("Template", sb.Template)
	row("State", sb.State)
	row("Persistent", yesNo(sb.Persistent))
	row("Created", ts(&sb.CreatedAt))
	row("Started", ts(sb.StartedAt))
	row("Expires", ts(sb.ExpiresAt))
	row("Deleted", ts(sb.DeletedAt))
	if sb.TimeoutSeconds > 0 {
		row("Timeout", (time.Duration(sb.TimeoutSeconds * float64(time.Second))).String())
	}
	row("Resources", formatResources(sb.Resources))
	row("Network", sb.Network)
	row("Workdir", sb.Workdir)
	row("Env", formatMap(sb.Env))
	row("Labels", formatMap(sb.Labels))
	iso := sb.Isolation
	if iso.Runtime != "" {
		row("Isolation", fmt.Sprintf("runtime=%s shared_kernel=%t user_namespace=%t seccomp=%s no_new_privileges=%t readonly_image=%t",
			iso.Runtime, iso.SharedKernel, iso.UserNamespace, orDash(iso.Seccomp), iso.NoNewPrivs, iso.ReadonlyImage))
		caps := "none"
		if len(iso.Capabilities) > 0 {
			caps = strings.Join(iso.Capabilities, ",")
		}
		row("Capabilities", caps)
	}
	row("Cause", sb.Cause)
	row("Reason", sb.Reason)
	row("Error", sb.Error)
	return tw.Flush()
}

func relTime(now, t time.Time) string {
	if t.After(now) {
		return "in " + age(t, now)
	}
	return age(now, t) + " ago"
}

func formatResources(r api.Resources) string {
	var parts []string
	if r.CPUs > 0 {
		parts = append(parts, "cpus="+strconv.FormatFloat(r.CPUs, 'f', -1, 64))
	}
	if r.MemoryBytes > 0 {
		parts = append(parts, "memory="+formatSize(r.MemoryBytes))
	}
	if r.Pids > 0 {
		parts = append(parts, "pids="+strconv.FormatInt(r.Pids, 10))
	}
	if len(parts) == 0 {
		return "unlimited"
	}
	return strings.Join(parts, " ")
}

func formatMap(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, " ")
}

func newEventsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "events ID",
		Short: "Show a sandbox's lifecycle events and mutating calls",
		Args:  exactArgs(1, "a sandbox id or name"),
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		evs, err := c.Events(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), evs)
		}
		tw := newTable(cmd.OutOrStdout())
		fmt.Fprintln(tw, "TIME\tTYPE\tFROM\tTO\tACTOR\tCAUSE\tOUTCOME\tMESSAGE")
		for _, e := range evs {
			msg := e.Message
			if e.Reason != "" {
				msg = strings.TrimSpace(e.Reason + " " + msg)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.Local().Format(time.RFC3339),
				e.Type, orDash(e.From), orDash(e.To), orDash(e.Actor), orDash(e.Cause), orDash(e.Outcome), msg)
		}
		return tw.Flush()
	}
	return cmd
}

func newRmCmd(g *globals) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:     "rm [-f] ID...",
		Aliases: []string{"delete"},
		Short:   "Delete sandboxes",
		Long:    "Delete sandboxes and print the id of each one deleted. A tombstone stays visible with 'berth ls --all'.",
		Args:    minArgs(1, "at least one sandbox id or name"),
	}
	out := addOutputFlag(cmd)
	cmd.Flags().BoolVarP(&force, "force", "f", false, "delete whatever the sandbox's state")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		removed := []api.Sandbox{}
		var failed int
		for _, id := range args {
			sb, err := c.DeleteSandbox(cmd.Context(), id, force)
			if err != nil {
				failed++
				fmt.Fprintf(cmd.ErrOrStderr(), "berth: %s\n", oneLine(err.Error()))
				continue
			}
			removed = append(removed, *sb)
			if !out.json() {
				fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
			}
		}
		if out.json() {
			if err := printJSON(cmd.OutOrStdout(), removed); err != nil {
				return err
			}
		}
		if failed > 0 {
			return &exitError{code: 1}
		}
		return nil
	}
	return cmd
}
