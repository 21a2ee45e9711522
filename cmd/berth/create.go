package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newCreateCmd(g *globals) *cobra.Command {
	var (
		sf         sandboxFlags
		name       string
		persistent bool
		labels     []string
	)
	cmd := &cobra.Command{
		Use:   "create [flags]",
		Short: "Create a sandbox and print its id",
		Long: `Create a sandbox and print its id once it is running. An ephemeral sandbox
(the default) loses its files when it is deleted or times out; --persistent
keeps its workspace across stop, start and daemon restarts.`,
		Example: `  id=$(berth create --memory 512m --timeout 1h)
  berth create --name dev --persistent --label team=ml`,
		Args: cobra.NoArgs,
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		req, err := sf.request()
		if err != nil {
			return err
		}
		req.Name, req.Persistent = name, persistent
		if req.Labels, err = parseKV(labels, "label"); err != nil {
			return err
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		sb, err := c.CreateSandbox(cmd.Context(), req)
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), sb)
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
		return err
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "unique name, usable wherever an id is")
	f.BoolVar(&persistent, "persistent", false, "keep the sandbox's workspace across stop/start and restarts")
	f.StringArrayVarP(&labels, "label", "l", nil, "label `K=V`; repeatable")
	sf.register(f, "hard lifetime of the sandbox; it is deleted when it runs out")
	return cmd
}
