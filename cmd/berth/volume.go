package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
)

func newVolumeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "volume",
		Aliases: []string{"volumes", "vol"},
		Short:   "Manage volumes: named, quota-limited filesystems",
		Long: `Manage volumes: named filesystems with a size and inode quota enforced by the
filesystem (writes past it fail with ENOSPC inside the sandbox). Attach one with
'berth create --volume NAME[:PATH[:ro]]'. A persistent sandbox's workspace volume
is listed here too; it outlives its sandbox only with 'create --keep-volume'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newVolumeCreateCmd(g), newVolumeLsCmd(g), newVolumeInspectCmd(g), newVolumeRmCmd(g))
	return cmd
}

func newVolumeCreateCmd(g *globals) *cobra.Command {
	var (
		size   sizeValue
		inodes int64
	)
	cmd := &cobra.Command{
		Use:     "create NAME [--size SIZE] [--inodes N]",
		Short:   "Create a volume and print its name",
		Example: "  berth volume create data --size 10g\n  berth create --volume data:/data",
		Args:    exactArgs(1, "a volume name"),
	}
	out := addOutputFlag(cmd)
	cmd.Flags().Var(&size, "size", "quota (e.g. 512m, 10g; default 1GiB)")
	cmd.Flags().Int64Var(&inodes, "inodes", 0, "limit on the number of files (default 1 per 16KiB)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if inodes < 0 {
			return fmt.Errorf("--inodes must not be negative")
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		v, err := c.CreateVolume(cmd.Context(), api.CreateVolumeRequest{Name: args[0], SizeBytes: int64(size), Inodes: inodes})
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), v)
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), v.Name)
		return err
	}
	return cmd
}

func newVolumeLsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List volumes with their usage",
		Args:    cobra.NoArgs,
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		vs, err := c.ListVolumes(cmd.Context())
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), vs)
		}
		return printVolumeTable(cmd.OutOrStdout(), vs, time.Now())
	}
	return cmd
}

func printVolumeTable(w io.Writer, vs []api.Volume, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tSTATE\tSIZE\tUSED\tINODES\tATTACHED\tKEEP\tAGE")
	for _, v := range vs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, orDash(v.State), formatSize(v.SizeBytes),
			formatSize(v.UsedBytes), formatInodes(v), orDash(v.AttachedTo), yesNo(v.Keep), age(now, v.CreatedAt))
	}
	return tw.Flush()
}

// formatInodes prints used/limit, or the used count alone without a limit.
func formatInodes(v api.Volume) string {
	if v.Inodes <= 0 {
		return fmt.Sprintf("%d", v.UsedInodes)
	}
	return fmt.Sprintf("%d/%d", v.UsedInodes, v.Inodes)
}

// formatUsage prints "12MiB/1GiB (1%)".
func formatUsage(used, size int64) string {
	s := formatSize(used) + "/" + formatSize(size)
	if size > 0 {
		s += fmt.Sprintf(" (%d%%)", used*100/size)
	}
	return s
}

func newVolumeInspectCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inspect NAME",
		Short: "Show a volume in detail",
		Args:  exactArgs(1, "a volume name"),
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		v, err := c.GetVolume(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), v)
		}
		return printVolume(cmd.OutOrStdout(), v, time.Now())
	}
	return cmd
}

func printVolume(w io.Writer, v *api.Volume, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "Name:\t%s\n", v.Name)
	fmt.Fprintf(tw, "ID:\t%s\n", orDash(v.ID))
	fmt.Fprintf(tw, "State:\t%s\n", orDash(v.State))
	fmt.Fprintf(tw, "Size:\t%s\n", formatSize(v.SizeBytes))
	fmt.Fprintf(tw, "Used:\t%s\n", formatUsage(v.UsedBytes, v.SizeBytes))
	fmt.Fprintf(tw, "Inodes:\t%s\n", formatInodes(*v))
	fmt.Fprintf(tw, "Attached to:\t%s\n", orDash(v.AttachedTo))
	fmt.Fprintf(tw, "Keep:\t%s\n", yesNo(v.Keep))
	if !v.CreatedAt.IsZero() {
		fmt.Fprintf(tw, "Created:\t%s (%s)\n", v.CreatedAt.Local().Format(time.RFC3339), relTime(now, v.CreatedAt))
	}
	return tw.Flush()
}

func newVolumeRmCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"remove", "delete"},
		Short:   "Delete volumes and their data",
		Long:    "Delete volumes and their data, printing the name of each one deleted. A volume attached to a sandbox that is not deleted cannot be removed.",
		Args:    minArgs(1, "at least one volume name"),
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		return eachArg(cmd, args, func(name string) error {
			if err := c.DeleteVolume(cmd.Context(), name); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), name)
			return nil
		})
	}
	return cmd
}
