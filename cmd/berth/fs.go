package main

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// `berth fs`: the file verbs besides cp, on ID:/path arguments.

func newFsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fs",
		Short: "List, inspect, create, remove and move files in a sandbox",
		Long: `File operations inside a sandbox; every path is ID:/path (the id or name of a
sandbox, then an absolute path) and is resolved inside the sandbox's root.
Copies are 'berth cp'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newFsLsCmd(g), newFsStatCmd(g), newFsMkdirCmd(g), newFsRmCmd(g), newFsMvCmd(g), newFsWatchCmd(g))
	return cmd
}

// parseFsArg parses ID:/path.
func parseFsArg(s string) (id, path string, err error) {
	e, err := parseCpArg(s)
	if err != nil {
		return "", "", err
	}
	if !e.remote() {
		return "", "", fmt.Errorf("invalid %q: want ID:/path", s)
	}
	if !strings.HasPrefix(e.path, "/") {
		return "", "", fmt.Errorf("invalid %q: the path must be absolute", s)
	}
	return e.sandbox, e.path, nil
}

// fsTarget parses an ID:/path argument and opens the client the verb
// talks to the daemon through; the caller closes it.
func fsTarget(g *globals, arg string) (c *client.Client, id, path string, err error) {
	if id, path, err = parseFsArg(arg); err != nil {
		return nil, "", "", err
	}
	if c, err = g.client(); err != nil {
		return nil, "", "", err
	}
	return c, id, path, nil
}

func newFsLsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls ID:/dir",
		Aliases: []string{"list"},
		Short:   "List a directory (ls -l style)",
		Example: "  berth fs ls $id:/workspace",
		Args:    exactArgs(1, "ID:/dir"),
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, id, p, err := fsTarget(g, args[0])
		if err != nil {
			return err
		}
		defer c.Close()
		fis, err := c.List(cmd.Context(), id, p)
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), fis)
		}
		return printFileTable(cmd.OutOrStdout(), fis)
	}
	return cmd
}

func newFsStatCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "stat ID:/path",
		Short:   "Describe a file (a symlink is described, not followed)",
		Example: "  berth fs stat $id:/etc/passwd -o json",
		Args:    exactArgs(1, "ID:/path"),
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, id, p, err := fsTarget(g, args[0])
		if err != nil {
			return err
		}
		defer c.Close()
		fi, err := c.Stat(cmd.Context(), id, p)
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), fi)
		}
		return printFileTable(cmd.OutOrStdout(), []api.FileInfo{*fi})
	}
	return cmd
}

func newFsMkdirCmd(g *globals) *cobra.Command {
	var parents bool
	cmd := &cobra.Command{
		Use:     "mkdir ID:/dir [-p]",
		Short:   "Create a directory",
		Example: "  berth fs mkdir -p $id:/workspace/a/b",
		Args:    exactArgs(1, "ID:/dir"),
	}
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "create missing parents; an existing directory is no error")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, id, p, err := fsTarget(g, args[0])
		if err != nil {
			return err
		}
		defer c.Close()
		return c.Mkdir(cmd.Context(), id, p, parents)
	}
	return cmd
}

func newFsRmCmd(g *globals) *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:     "rm ID:/path [-r]",
		Short:   "Remove a file, a symlink (never its target) or an empty directory",
		Example: "  berth fs rm -r $id:/workspace/build",
		Args:    exactArgs(1, "ID:/path"),
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove a directory with its contents")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, id, p, err := fsTarget(g, args[0])
		if err != nil {
			return err
		}
		defer c.Close()
		return c.Remove(cmd.Context(), id, p, recursive)
	}
	return cmd
}

func newFsMvCmd(g *globals) *cobra.Command {
	var noClobber bool
	cmd := &cobra.Command{
		Use:   "mv ID:/src /dst [-n]",
		Short: "Move or rename a file or directory within a sandbox",
		Long: `Move SRC to DST in the same sandbox by rename(2)'s rules: DST is the new path
(not a directory to move into); a file replaces a file or symlink, a directory
replaces an empty directory; a directory onto a file, a file onto a directory
or a directory onto a non-empty one fails. Symlinks are moved, never followed.
Moving across mounts fails: copy with 'berth cp' then remove.`,
		Example: "  berth fs mv $id:/workspace/out.tmp /workspace/out",
		Args:    exactArgs(2, "ID:/src and /dst"),
	}
	cmd.Flags().BoolVarP(&noClobber, "no-clobber", "n", false, "fail instead of replacing an existing DST")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, src, err := parseFsArg(args[0])
		if err != nil {
			return err
		}
		dst := args[1]
		if did, dp, err := parseFsArg(dst); err == nil {
			if did != id {
				return fmt.Errorf("mv moves within one sandbox (%s and %s differ); use berth cp", id, did)
			}
			dst = dp
		}
		if !strings.HasPrefix(dst, "/") {
			return fmt.Errorf("invalid %q: the destination must be an absolute path", dst)
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		return c.Move(cmd.Context(), id, src, dst, noClobber)
	}
	return cmd
}

// printFileTable prints files as ls -l does: mode, owner, size, time,
// name (and a symlink's target).
func printFileTable(w io.Writer, fis []api.FileInfo) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "MODE\tUID\tGID\tSIZE\tMODIFIED\tNAME")
	for _, fi := range fis {
		ms := fi.ModeString
		if ms == "" { // an older daemon
			ms = api.ModeString(fs.FileMode(fi.Mode))
		}
		name := fi.Name
		if fi.Link != "" {
			name += " -> " + fi.Link
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", ms, idOrDash(fi.UID), idOrDash(fi.GID), fi.Size,
			fi.ModTime.Local().Format(time.DateTime), name)
	}
	return tw.Flush()
}

func idOrDash(p *uint32) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

func newFsWatchCmd(g *globals) *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:   "watch ID:/dir [-r]",
		Short: "Print the changes under a directory as they happen",
		Long: `Print one line per change under a directory until interrupted: create, write (a
file written and closed), remove, rename OLD -> NEW, and overflow when events
were lost (rescan). With -r the whole subtree, new directories included. With
-o json each line is the API's WatchEvent (the first is "ready").`,
		Example: "  berth fs watch -r $id:/workspace",
		Args:    exactArgs(1, "ID:/dir"),
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "watch the whole subtree")
	out := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, id, p, err := fsTarget(g, args[0])
		if err != nil {
			return err
		}
		defer c.Close()
		w := cmd.OutOrStdout()
		return c.Watch(cmd.Context(), id, p, recursive, func(ev api.WatchEvent) error {
			if out.json() {
				return json.NewEncoder(w).Encode(ev)
			}
			var err error
			switch ev.Type {
			case api.WatchReady:
				_, err = fmt.Fprintf(cmd.ErrOrStderr(), "watching %s\n", ev.Path)
			case api.WatchRename:
				_, err = fmt.Fprintf(w, "rename %s -> %s\n", ev.OldPath, ev.Path)
			case api.WatchOverflow:
				_, err = fmt.Fprintln(w, "overflow (events lost)")
			default:
				_, err = fmt.Fprintf(w, "%s %s\n", ev.Type, ev.Path)
			}
			return err
		})
	}
	return cmd
}
