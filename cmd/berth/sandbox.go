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
		Aliases: []string{"list"}, // "ps" lists a sandbox's processes (ps.go)
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
	fmt.Fprintln(tw, "ID\tNAME\tTEMPLATE\tSTATE\tPERSISTENT\tSTORAGE\tAGE")
	for _, sb := range sbs {
		storage := "-"
		if sb.Storage != nil {
			storage = formatSize(sb.Storage.UsedBytes) + "/" + formatSize(sb.Storage.SizeBytes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sb.ID, orDash(sb.Name), orDash(sb.Template),
			sb.State, yesNo(sb.Persistent), storage, age(now, sb.CreatedAt))
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
	if sb.Persistent {
		row("Persist root", yesNo(sb.PersistRoot))
		row("Keep volume", yesNo(sb.KeepVolume))
	}
	row("Hostname", sb.Hostname)
	row("Created", ts(&sb.CreatedAt))
	row("Started", ts(sb.StartedAt))
	row("Last activity", ts(sb.LastActivityAt))
	row("Paused", ts(sb.PausedAt))
	row("Stopped", ts(sb.StoppedAt))
	row("Expires", ts(sb.ExpiresAt))
	row("Deleted", ts(sb.DeletedAt))
	if sb.NextAction != "" {
		next := sb.NextAction
		if at := ts(sb.NextActionAt); at != "" {
			next += " at " + at
		}
		row("Next action", next)
	}
	if sb.TimeoutSeconds > 0 {
		row("Timeout", formatDuration(secondsDuration(sb.TimeoutSeconds)))
	}
	row("Policy", formatPolicy(sb.Policy))
	if st := sb.Storage; st != nil {
		v := formatUsage(st.UsedBytes, st.SizeBytes) + ", inodes " + formatInodes(*st)
		if st.Name != "" {
			v += " (volume " + st.Name + ")"
		}
		row("Storage", v)
	}
	if d := sb.Disk; d != nil {
		v := formatUsage(d.UsedBytes, d.CapBytes) + fmt.Sprintf(", inodes %d/%d", d.UsedInodes, d.CapInodes)
		if d.CapBytes == 0 {
			v = "uncapped"
		}
		if !d.Enforced {
			v += " (not enforced: " + d.Note + ")"
		}
		row("Disk", v)
	}
	row("Volumes", formatMounts(sb.Volumes))
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
		if iso.IDMode != "" {
			row("Host ids", fmt.Sprintf("mode=%s uid=%d gid=%d count=%d userns_owner=%s",
				iso.IDMode, iso.HostUID, iso.HostGID, iso.HostIDs, orDash(iso.UsernsOwner)))
		}
	}
	if l := sb.Lineage; l != nil {
		row("Parent", l.Parent)
		row("From snapshot", l.FromSnapshot)
		row("Children", strings.Join(l.Children, ", "))
	}
	row("Cause", sb.Cause)
	row("Reason", sb.Reason)
	row("Error", sb.Error)
	return tw.Flush()
}

// formatPolicy prints every policy setting as key=value, "none" for a timer
// that is not set.
func formatPolicy(p api.Policy) string {
	var parts []string
	timer := func(k string, secs float64, actionKey, action string) {
		if secs <= 0 {
			parts = append(parts, k+"=none")
			return
		}
		parts = append(parts, k+"="+formatDuration(secondsDuration(secs)))
		if actionKey != "" && action != "" {
			parts = append(parts, actionKey+"="+action)
		}
	}
	timer("idle_timeout", p.IdleTimeoutSeconds, "on_idle", p.OnIdle)
	timer("max_age", p.MaxAgeSeconds, "on_max_age", p.OnMaxAge)
	timer("retention", p.RetentionSeconds, "", "")
	parts = append(parts, "auto_resume="+strconv.FormatBool(p.AutoResume))
	if p.IdleCPUThreshold != 0 {
		parts = append(parts, "idle_cpu_threshold="+strconv.FormatFloat(p.IdleCPUThreshold, 'f', -1, 64))
	}
	return strings.Join(parts, " ")
}

// formatMounts prints volume mounts as NAME:PATH[:ro], comma-separated.
func formatMounts(ms []api.VolumeMount) string {
	var parts []string
	for _, m := range ms {
		s := m.Name + ":" + m.Path
		if m.ReadOnly {
			s += ":ro"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
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
	if r.DiskBytes > 0 {
		parts = append(parts, "disk="+formatSize(r.DiskBytes))
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
	var after int64
	cmd := &cobra.Command{
		Use:   "events ID",
		Short: "Show a sandbox's lifecycle events and mutating calls",
		Long: `Show a sandbox's recorded events, oldest first: every state transition with
its cause (user, policy, reconciler, admin) and outcome, and every mutating call.
--after N shows only the events whose id is greater than N (the ID column of
-o json), to pick up where an earlier call left off.`,
		Args: exactArgs(1, "a sandbox id or name"),
	}
	out := addOutputFlag(cmd)
	cmd.Flags().Int64Var(&after, "after", 0, "only events with an id greater than `N`")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if after < 0 {
			return fmt.Errorf("--after must not be negative")
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		var evs []api.Event
		if cmd.Flags().Changed("after") {
			evs, err = c.EventsAfter(cmd.Context(), args[0], after)
		} else {
			evs, err = c.Events(cmd.Context(), args[0])
		}
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
		failed := eachArg(cmd, args, func(id string) error {
			sb, err := c.DeleteSandbox(cmd.Context(), id, force)
			if err != nil {
				return err
			}
			removed = append(removed, *sb)
			if !out.json() {
				fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
			}
			return nil
		})
		if out.json() {
			if err := printJSON(cmd.OutOrStdout(), removed); err != nil {
				return err
			}
		}
		return failed
	}
	return cmd
}
