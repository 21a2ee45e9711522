package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// Shell completion (`berth completion bash|zsh|fish|powershell`): verbs
// whose first argument is a sandbox complete the caller's sandbox ids and
// names, template verbs and every --template flag the template names,
// both read from the daemon the flags or environment name.

// addCompletions sets the completion of every verb under root by the
// placeholders its Use line names (ID, ID..., PARENT; NAME under
// `template`), and of every --template flag.
func addCompletions(root *cobra.Command, g *globals) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c.Flags().Lookup("template") != nil {
			_ = c.RegisterFlagCompletionFunc("template", completeTemplates(g))
		}
		if c.ValidArgsFunction != nil {
			return
		}
		fields := strings.Fields(c.Use)
		if len(fields) < 2 {
			return
		}
		switch arg := fields[1]; {
		case arg == "ID" || arg == "PARENT" || arg == "SRC" && c.Name() == "cp":
			c.ValidArgsFunction = completeSandboxes(g, false)
		case arg == "ID...":
			c.ValidArgsFunction = completeSandboxes(g, true)
		case arg == "NAME" && c.Parent() != nil && c.Parent().Name() == "template":
			c.ValidArgsFunction = completeTemplates(g)
		}
	}
	walk(root)
}

type completeFunc = func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective)

// completeSandboxes completes the first argument (every argument, with
// many) with the live sandboxes' ids and names.
func completeSandboxes(g *globals, many bool) completeFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 && !many {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := g.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		defer c.Close()
		sbs, err := c.ListSandboxes(cmd.Context(), false)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var out []cobra.Completion
		for _, sb := range sbs {
			desc := sb.State + " " + sb.Template
			if strings.HasPrefix(sb.ID, prefix) {
				out = append(out, cobra.CompletionWithDesc(sb.ID, compSafe(strings.TrimSpace(orDash(sb.Name)+" "+desc))))
			}
			if sb.Name != "" && strings.HasPrefix(sb.Name, prefix) {
				out = append(out, cobra.CompletionWithDesc(compSafe(sb.Name), compSafe(sb.ID+" "+desc)))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeTemplates completes with the template names the caller sees.
func completeTemplates(g *globals) completeFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		c, err := g.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		defer c.Close()
		tpls, err := c.ListTemplates(cmd.Context())
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var out []cobra.Completion
		for _, t := range tpls {
			if strings.HasPrefix(t.Name, prefix) {
				out = append(out, cobra.Completion(compSafe(t.Name)))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// compSafe keeps a completion word or description to one plain field:
// control characters (a tab would split the field, a newline the list)
// become '?'. Names are checked at create, but the daemon is a remote
// party.
func compSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 {
			return '?'
		}
		return r
	}, s)
}
