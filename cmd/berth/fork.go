package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/berth-sh/berth/api"
)

// forkFlags are the flags of berth fork.
type forkFlags struct {
	count      int
	persistent bool
	timeout    durationValue
	labels     []string
	env        []string
	namePrefix string
}

// request builds the fork request these flags describe.
func (f *forkFlags) request(lookup func(string) (string, bool)) (api.ForkRequest, error) {
	if f.count < 1 || f.count > 64 {
		return api.ForkRequest{}, fmt.Errorf("invalid --count %d: want 1 to 64 children", f.count)
	}
	labels, err := parseKV(f.labels, "label")
	if err != nil {
		return api.ForkRequest{}, err
	}
	env, err := parseEnv(f.env, lookup)
	if err != nil {
		return api.ForkRequest{}, err
	}
	return api.ForkRequest{
		Count:          f.count,
		Persistent:     f.persistent,
		TimeoutSeconds: f.timeout.seconds(),
		Labels:         labels,
		Env:            env,
		NamePrefix:     f.namePrefix,
	}, nil
}

func newForkCmd(g *globals) *cobra.Command {
	var ff forkFlags
	cmd := &cobra.Command{
		Use:   "fork PARENT [--count N]",
		Short: "Create children of a sandbox from its current state and print their ids",
		Long: `Create child sandboxes whose filesystem (workspace and writable root) starts as
a copy-on-write view of PARENT's state at this instant, and print their ids, one
per line. The parent keeps running (frozen for at most the instant of the
snapshot); writes in a child never reach the parent or a sibling.

Children are ephemeral unless --persistent is given: they are destroyed at the
end of their --timeout or on 'berth rm'. Bring results back with
'berth cp CHILD:/path PARENT:/dir' or 'berth export CHILD PATH...'.`,
		Example: `  kid=$(berth fork dev)
  berth fork dev --count 8 --timeout 10m --name-prefix try --label task=eval
  berth cp $kid:/workspace/patch.diff dev:/workspace/incoming && berth rm -f $kid`,
		Args: exactArgs(1, "a parent sandbox id or name"),
	}
	out := addOutputFlag(cmd)
	f := cmd.Flags()
	f.IntVarP(&ff.count, "count", "n", 1, "number of children (1 to 64)")
	f.BoolVar(&ff.persistent, "persistent", false, "make the children persistent (default: ephemeral)")
	f.Var(&ff.timeout, "timeout", "hard lifetime of each child (e.g. 30m, or seconds)")
	f.StringArrayVarP(&ff.labels, "label", "l", nil, "label `K=V` for the children; repeatable")
	f.StringArrayVarP(&ff.env, "env", "e", nil, "environment variable `K=V` (or K to pass the local value) for the children; repeatable")
	f.StringVar(&ff.namePrefix, "name-prefix", "", "name the children `PREFIX`-1, PREFIX-2, ...")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		req, err := ff.request(os.LookupEnv)
		if err != nil {
			return err
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		fr, err := c.Fork(cmd.Context(), args[0], req)
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), fr)
		}
		for _, ch := range fr.Children {
			if _, err := fmt.Fprintln(cmd.OutOrStdout(), ch.ID); err != nil {
				return err
			}
		}
		return nil
	}
	return cmd
}

func newExportCmd(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "export ID PATH... [-o FILE]",
		Short: "Write a tar archive of named paths of a sandbox",
		Long: `Write a tar archive of exactly the named paths of a sandbox (files or
directories) to FILE, or to stdout when -o is not given or is "-". Nothing else
of the sandbox is included: this is how a reviewed artefact leaves a child.`,
		Example: `  berth export $kid /workspace/out /workspace/report.json -o result.tar
  berth export $kid /workspace/out | tar x -C ./incoming`,
		Args: minArgs(2, "a sandbox id or name and at least one path"),
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "write the archive to `FILE` instead of stdout")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, paths := args[0], args[1:]
		w := cmd.OutOrStdout()
		if output == "" || output == "-" {
			if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
				return fmt.Errorf("refusing to write a tar archive to a terminal: use -o FILE or a pipe")
			}
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		if output == "" || output == "-" {
			return c.Export(cmd.Context(), id, paths, w)
		}
		// A temporary file beside FILE, renamed into place: a failed
		// export leaves no half-written archive.
		tmp, err := os.CreateTemp(filepath.Dir(output), "."+filepath.Base(output)+".berth-*")
		if err != nil {
			return fmt.Errorf("cannot write %s: %w", output, unwrapPathError(err))
		}
		defer os.Remove(tmp.Name())
		if err := c.Export(cmd.Context(), id, paths, tmp); err != nil {
			tmp.Close()
			return err
		}
		if err := tmp.Chmod(0o644); err != nil {
			tmp.Close()
			return err
		}
		if err := tmp.Close(); err != nil {
			return err
		}
		return os.Rename(tmp.Name(), output)
	}
	return cmd
}

func newSnapshotCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "snapshot",
		Aliases: []string{"snapshots", "snap"},
		Short:   "Manage snapshots (point-in-time copies of a sandbox's filesystem)",
		Long: `A snapshot is a named, crash-consistent copy of a sandbox's filesystem state:
its workspace volume and writable root. Restore one in place with 'berth snapshot
restore', or start a new sandbox from it with 'berth create --snapshot SNAP'.
A snapshot outlives the sandbox it was taken from.`,
	}
	cmd.AddCommand(newSnapshotCreateCmd(g), newSnapshotLsCmd(g), newSnapshotInspectCmd(g),
		newSnapshotRmCmd(g), newSnapshotRestoreCmd(g))
	return cmd
}

func newSnapshotCreateCmd(g *globals) *cobra.Command {
	var (
		name      string
		retention durationValue
	)
	cmd := &cobra.Command{
		Use:     "create ID [--name N] [--retention D]",
		Short:   "Snapshot a sandbox and print the snapshot's id",
		Example: "  berth snapshot create dev --name before-upgrade --retention 7d",
		Args:    exactArgs(1, "a sandbox id or name"),
	}
	out := addOutputFlag(cmd)
	cmd.Flags().StringVar(&name, "name", "", "unique name, usable wherever a snapshot id is")
	cmd.Flags().Var(&retention, "retention", "delete the snapshot this long after it is taken (e.g. 24h, 7d; default: kept)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		s, err := c.CreateSnapshot(cmd.Context(), args[0], api.CreateSnapshotRequest{Name: name, RetentionSeconds: retention.seconds()})
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), s)
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), s.ID)
		return err
	}
	return cmd
}

func newSnapshotLsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls [ID]",
		Aliases: []string{"list"},
		Short:   "List snapshots, all of them or those of one sandbox",
		Args:    cobra.MaximumNArgs(1),
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		sandbox := ""
		if len(args) == 1 {
			sandbox = args[0]
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		ss, err := c.ListSnapshots(cmd.Context(), sandbox)
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), ss)
		}
		return printSnapshotTable(cmd.OutOrStdout(), ss, time.Now())
	}
	return cmd
}

func printSnapshotTable(w io.Writer, ss []api.Snapshot, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tNAME\tSANDBOX\tTEMPLATE\tSIZE\tAGE\tEXPIRES")
	for _, s := range ss {
		expires := "-"
		if s.ExpiresAt != nil && !s.ExpiresAt.IsZero() {
			expires = relTime(now, *s.ExpiresAt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, orDash(s.Name), orDash(s.SandboxID), orDash(s.Template),
			formatSize(s.SizeBytes), age(now, s.CreatedAt), expires)
	}
	return tw.Flush()
}

func newSnapshotInspectCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inspect SNAP",
		Short: "Show a snapshot in detail",
		Args:  exactArgs(1, "a snapshot id or name"),
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		s, err := c.GetSnapshot(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), s)
		}
		now := time.Now()
		tw := newTable(cmd.OutOrStdout())
		fmt.Fprintf(tw, "ID:\t%s\nName:\t%s\nSandbox:\t%s\nTemplate:\t%s\nSize:\t%s\n",
			s.ID, orDash(s.Name), orDash(s.SandboxID), orDash(s.Template), formatSize(s.SizeBytes))
		if s.Parent != "" {
			fmt.Fprintf(tw, "Parent:\t%s\n", s.Parent)
		}
		fmt.Fprintf(tw, "Created:\t%s (%s)\n", s.CreatedAt.Local().Format(time.RFC3339), relTime(now, s.CreatedAt))
		if s.ExpiresAt != nil && !s.ExpiresAt.IsZero() {
			fmt.Fprintf(tw, "Expires:\t%s (%s)\n", s.ExpiresAt.Local().Format(time.RFC3339), relTime(now, *s.ExpiresAt))
		}
		return tw.Flush()
	}
	return cmd
}

func newSnapshotRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm SNAP...",
		Aliases: []string{"delete"},
		Short:   "Delete snapshots",
		Args:    minArgs(1, "at least one snapshot id or name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			return eachArg(cmd, args, func(id string) error {
				if err := c.DeleteSnapshot(cmd.Context(), id); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), id)
				return nil
			})
		},
	}
}

func newSnapshotRestoreCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "restore SNAP",
		Short: "Put the sandbox a snapshot was taken from back to the snapshot, in place",
		Long: `Restore a snapshot into the sandbox it was taken from: its workspace and
writable root become the snapshot's content again, byte for byte; its id, name,
config and policies are kept. Prints the sandbox's id. To start a new sandbox
from a snapshot instead, use 'berth create --snapshot SNAP'.`,
		Args: exactArgs(1, "a snapshot id or name"),
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		sb, err := c.RestoreSnapshot(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), sb)
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
		return err
	}
	return cmd
}
