package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// lifecycleVerb describes one of the verbs that move a sandbox between
// states and answer with the sandbox.
type lifecycleVerb struct {
	use, short, long string
	multi            bool // takes several ids
	call             func(*client.Client, context.Context, string) (*api.Sandbox, error)
}

var lifecycleVerbs = []lifecycleVerb{
	{use: "pause", multi: true, call: (*client.Client).Pause,
		short: "Freeze every process of sandboxes (memory kept, no CPU)",
		long:  "Freeze every process of running sandboxes: their memory and processes are kept and use no CPU until 'berth resume'."},
	{use: "resume", multi: true, call: (*client.Client).Resume,
		short: "Thaw paused sandboxes",
		long:  "Thaw paused sandboxes: their processes carry on where they were frozen."},
	{use: "stop", multi: true, call: (*client.Client).Stop,
		short: "Scale sandboxes to zero (volume, config and hostname kept)",
		long: `Stop sandboxes (scale to zero): their processes and memory are gone; the
workspace volume (and, with --persist-root, the root layer), config, policies
and network identity are kept for 'berth start'. A --retention policy deletes a
stopped sandbox after that long.

A running sandbox stops gracefully: every process gets the template's stop
signal (its image's STOPSIGNAL, else SIGTERM) and --stop-timeout (10s) to end,
then whatever is left is killed. (rm of a running sandbox kills at once.)`},
	{use: "start", multi: true, call: (*client.Client).Start,
		short: "Start stopped sandboxes from their template plus their volume",
		long:  "Start stopped sandboxes again from their template plus their persisted volume."},
	{use: "reset", multi: true, call: (*client.Client).Reset,
		short: "Return sandboxes' files to their template (config kept)",
		long:  "Return the workspace and writable layer of sandboxes to their template. Their config and policies are kept. Everything written since creation is lost."},
	{use: "touch", multi: true, call: (*client.Client).Touch,
		short: "Record activity on sandboxes (restart their idle timers)",
		long:  "Record activity on sandboxes, as an exec would: their idle timers start again. A keep-alive for sandboxes with --idle-timeout."},
	{use: "quarantine", call: (*client.Client).Quarantine,
		short: "Freeze a sandbox, cut its network and keep it for inspection",
		long: `Quarantine a sandbox: freeze it, cut its network, refuse exec and writes,
and keep all of its state for inspection ('berth inspect', 'berth diff',
read-only 'berth cp' for admins). 'berth release' or 'berth rm' ends it.`},
	{use: "release", call: (*client.Client).Release,
		short: "End a sandbox's quarantine",
		long:  "End a sandbox's quarantine."},
}

func newLifecycleCmd(g *globals, v lifecycleVerb) *cobra.Command {
	cmd := &cobra.Command{
		Use:   v.use + " ID",
		Short: v.short,
		Args:  exactArgs(1, "a sandbox id or name"),
	}
	if v.multi {
		cmd.Use = v.use + " ID..."
		cmd.Args = minArgs(1, "at least one sandbox id or name")
		cmd.Long = v.long + "\n\nPrints the id of each sandbox acted on; with -o json, a JSON array of the sandboxes as they are afterwards. A sandbox in the wrong state is reported (naming its state) and the others are still acted on; the exit code is then 1."
	} else {
		cmd.Long = v.long + "\n\nPrints the sandbox's id; with -o json, the sandbox as it is afterwards."
	}
	out := addOutputFlag(cmd)
	var grace time.Duration
	if v.use == "stop" {
		cmd.Flags().DurationVar(&grace, "stop-timeout", 10*time.Second,
			"how long the processes have between the stop signal and the kill (0: kill at once)")
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		if v.use == "stop" && cmd.Flags().Changed("stop-timeout") {
			v.call = func(c *client.Client, ctx context.Context, id string) (*api.Sandbox, error) {
				return c.StopTimeout(ctx, id, grace)
			}
		}
		if !v.multi {
			sb, err := v.call(c, cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if out.json() {
				return printJSON(cmd.OutOrStdout(), sb)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
			return err
		}
		done := []api.Sandbox{}
		failed := eachArg(cmd, args, func(id string) error {
			sb, err := v.call(c, cmd.Context(), id)
			if err != nil {
				return err
			}
			done = append(done, *sb)
			if !out.json() {
				fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
			}
			return nil
		})
		if out.json() {
			if err := printJSON(cmd.OutOrStdout(), done); err != nil {
				return err
			}
		}
		return failed
	}
	return cmd
}

func newDiffCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "diff ID",
		Short: "List files added, changed and removed against the template",
		Long: `List the paths of a sandbox's filesystem that were added, changed or removed
since it was made from its template, with their sizes. Directories end in /.`,
		Args: exactArgs(1, "a sandbox id or name"),
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		d, err := c.Diff(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), d)
		}
		tw := newTable(cmd.OutOrStdout())
		fmt.Fprintln(tw, "KIND\tSIZE\tPATH")
		for _, e := range d {
			size, path := formatSize(e.Size), e.Path
			if e.Kind == "removed" && e.Size == 0 {
				size = "-"
			}
			if e.Dir {
				size = "-"
				if !strings.HasSuffix(path, "/") {
					path += "/"
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", e.Kind, size, path)
		}
		return tw.Flush()
	}
	return cmd
}
