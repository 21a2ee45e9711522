package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

func newLsCmd(g *globals) *cobra.Command {
	var all, quiet bool
	var filters []string
	cmd := &cobra.Command{
		Use:     "ls [--all] [-q] [--filter KEY=VALUE]...",
		Aliases: []string{"list"}, // "ps" lists a sandbox's processes (ps.go)
		Short:   "List sandboxes",
		Long: `List sandboxes. --filter keeps those that match every filter given:
label=KEY=VALUE (or label=KEY: the label is set), state=STATE, template=NAME,
name=NAME; several in one flag are separated by commas, as docker's.`,
		Example: `  berth ls -q --filter label=team=ml
  berth ls --filter state=stopped,template=py`,
		Args: cobra.NoArgs,
	}
	out := addOutputFlag(cmd)
	cmd.Flags().BoolVarP(&all, "all", "a", false, "include deleted sandboxes (tombstones)")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print the ids only, one a line")
	cmd.Flags().StringArrayVarP(&filters, "filter", "f", nil, "keep sandboxes matching `KEY=VALUE`: label=K[=V], state=S, template=T, name=N (repeatable)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		match, err := parseSandboxFilters(filters)
		if err != nil {
			return err
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		sbs, err := c.ListSandboxes(cmd.Context(), all)
		if err != nil {
			return err
		}
		kept := sbs[:0]
		for _, sb := range sbs {
			if match(&sb) {
				kept = append(kept, sb)
			}
		}
		sbs = kept
		if quiet {
			for _, sb := range sbs {
				fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
			}
			return nil
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), sbs)
		}
		return printSandboxTable(cmd.OutOrStdout(), sbs, time.Now())
	}
	return cmd
}

// parseSandboxFilters reads ls's --filter values into one predicate that
// holds when every filter does.
func parseSandboxFilters(vals []string) (func(*api.Sandbox) bool, error) {
	var preds []func(*api.Sandbox) bool
	for _, v := range vals {
		for _, f := range strings.Split(v, ",") {
			key, val, ok := strings.Cut(f, "=")
			if !ok || val == "" {
				return nil, fmt.Errorf("invalid --filter %q: want label=KEY[=VALUE], state=STATE, template=NAME or name=NAME", f)
			}
			switch key {
			case "label":
				lk, lv, hasV := strings.Cut(val, "=")
				preds = append(preds, func(sb *api.Sandbox) bool {
					got, set := sb.Labels[lk]
					return set && (!hasV || got == lv)
				})
			case "state":
				preds = append(preds, func(sb *api.Sandbox) bool { return sb.State == val })
			case "template":
				preds = append(preds, func(sb *api.Sandbox) bool { return sb.Template == val })
			case "name":
				preds = append(preds, func(sb *api.Sandbox) bool { return sb.Name == val })
			default:
				return nil, fmt.Errorf("invalid --filter %q: unknown key %q (label, state, template, name)", f, key)
			}
		}
	}
	return func(sb *api.Sandbox) bool {
		for _, p := range preds {
			if !p(sb) {
				return false
			}
		}
		return true
	}, nil
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
	if sb.Sudo {
		who := "root"
		if sb.User != "" {
			who += " and " + sb.User
		}
		row("Sudo", "yes ("+who+")")
	}
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
	var (
		after  int64
		follow bool
		types  []string
	)
	cmd := &cobra.Command{
		Use:   "events [ID]",
		Short: "Show sandboxes' lifecycle events and mutating calls, or follow them live",
		Long: `Show a sandbox's recorded events, oldest first, or with no ID those of every
sandbox you may see: every state transition with its cause (user, policy,
reconciler, admin) and outcome, and every mutating call. The ID column is the
event's id: --after N shows only the events whose id is greater than N, to
pick up where an earlier call left off. --type T shows only events of type T
(repeatable: state, exec, ...).

--follow (-f) keeps printing events as they are recorded, until interrupted;
after a cut (a daemon restart) it reconnects and goes on after the last event
it printed, so none is lost or printed twice. With -o json it prints one JSON
object per line.`,
		Args: cobra.MaximumNArgs(1),
	}
	out := addOutputFlag(cmd)
	cmd.Flags().Int64Var(&after, "after", 0, "only events with an id greater than `N`")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events as they happen")
	cmd.Flags().StringArrayVar(&types, "type", nil, "only events of this `TYPE` (repeatable)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if after < 0 {
			return fmt.Errorf("--after must not be negative")
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		q := client.EventsQuery{Sandboxes: args, Types: types, After: after}
		w := cmd.OutOrStdout()
		all := len(args) == 0
		if follow {
			return followEvents(cmd.Context(), c, q, w, out.json(), all)
		}
		var evs []api.Event
		switch {
		case all || len(types) > 0:
			evs, err = c.ListAllEvents(cmd.Context(), q)
		case cmd.Flags().Changed("after"):
			evs, err = c.EventsAfter(cmd.Context(), args[0], after)
		default:
			evs, err = c.Events(cmd.Context(), args[0])
		}
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(w, evs)
		}
		tw := newTable(w)
		eventHeader(tw, all)
		for _, e := range evs {
			eventRow(tw, e, all)
		}
		return tw.Flush()
	}
	return cmd
}

// followEvents prints the events q selects, then each new one, until ctx
// ends: as a table of fixed column widths written row by row (a
// tabwriter flushed per row aligns each row by itself only), or one JSON
// object per line.
func followEvents(ctx context.Context, c *client.Client, q client.EventsQuery, w io.Writer, asJSON, all bool) error {
	if !asJSON {
		if _, err := io.WriteString(w, fixedRow(eventHeaderCells(all), all)); err != nil {
			return err
		}
	}
	enc := json.NewEncoder(w)
	return c.StreamEvents(ctx, q, func(e api.Event) error {
		if asJSON {
			return enc.Encode(e)
		}
		_, err := io.WriteString(w, fixedRow(eventCells(e, all), all))
		return err
	})
}

// followWidths are the followed table's column widths, each the longest
// value its column usually holds (ids of 16, RFC 3339 times with an
// offset, the longest state, "lease:" and an id); a longer value shifts
// only the rest of its own row.
var followWidths = map[string]int{"ID": 6, "TIME": 25, "SANDBOX": 16, "TYPE": 10, "FROM": 11, "TO": 11,
	"ACTOR": 22, "CAUSE": 10, "OUTCOME": 7}

func fixedRow(cells []string, all bool) string {
	hdr := eventHeaderCells(all)
	var b strings.Builder
	for i, c := range cells {
		if i == len(cells)-1 {
			b.WriteString(c)
			break
		}
		b.WriteString(c)
		if pad := followWidths[hdr[i]] - len(c); pad > 0 {
			b.WriteString(strings.Repeat(" ", pad))
		}
		b.WriteString("  ")
	}
	b.WriteString("\n")
	return b.String()
}

func eventHeaderCells(all bool) []string {
	if all {
		return []string{"ID", "TIME", "SANDBOX", "TYPE", "FROM", "TO", "ACTOR", "CAUSE", "OUTCOME", "MESSAGE"}
	}
	return []string{"ID", "TIME", "TYPE", "FROM", "TO", "ACTOR", "CAUSE", "OUTCOME", "MESSAGE"}
}

func eventHeader(tw io.Writer, all bool) {
	fmt.Fprintln(tw, strings.Join(eventHeaderCells(all), "\t"))
}

func eventCells(e api.Event, all bool) []string {
	msg := e.Message
	if e.Reason != "" {
		msg = strings.TrimSpace(e.Reason + " " + msg)
	}
	cells := []string{strconv.FormatInt(e.ID, 10), e.Time.Local().Format(time.RFC3339)}
	if all {
		cells = append(cells, e.SandboxID)
	}
	return append(cells, e.Type, orDash(e.From), orDash(e.To), orDash(e.Actor), orDash(e.Cause), orDash(e.Outcome), msg)
}

func eventRow(tw io.Writer, e api.Event, all bool) {
	fmt.Fprintln(tw, strings.Join(eventCells(e, all), "\t"))
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
