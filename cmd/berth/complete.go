package main

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// Shell completion (`berth completion bash|zsh|fish|powershell`): verbs
// whose first argument is a sandbox complete the caller's sandbox ids and
// names, template verbs and every --template flag the template names,
// both read from the daemon the flags or environment name.

// completionTimeout bounds each daemon call a completion makes: a slow or
// unreachable daemon completes nothing rather than hang the shell.
var completionTimeout = 2 * time.Second

// addCompletions sets the completion of every verb under root by the
// placeholder its Use line names first, after any flags ("[flags]",
// "[-f]", "[-s SIGNAL]"): ID, [ID], PARENT, ID..., ID:/path; NAME or
// NAME... under template. And of every --template flag.
func addCompletions(root *cobra.Command, g *globals) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c.Flags().Lookup("template") != nil {
			// A flag's value completes whatever the positional arguments.
			_ = c.RegisterFlagCompletionFunc("template", completeTemplates(g, true))
		}
		if c.ValidArgsFunction != nil {
			return
		}
		arg := firstArgWord(c.Use)
		inTemplate := c.Parent() != nil && c.Parent().Name() == "template"
		switch {
		case arg == "ID" || arg == "[ID]" || arg == "PARENT" || arg == "SRC" && c.Name() == "cp":
			c.ValidArgsFunction = completeSandboxes(g, false, "")
		case arg == "ID...":
			c.ValidArgsFunction = completeSandboxes(g, true, "")
		case strings.HasPrefix(arg, "ID:/"):
			c.ValidArgsFunction = completeSandboxes(g, false, ":")
		case arg == "NAME" && inTemplate:
			c.ValidArgsFunction = completeTemplates(g, false)
		case arg == "NAME..." && inTemplate:
			c.ValidArgsFunction = completeTemplates(g, true)
		}
	}
	walk(root)
}

// firstArgWord is the first word of a Use line after the verb that is not
// a flag: "[flags]", "[-f]" and "[-s SIGNAL]" are skipped.
func firstArgWord(use string) string {
	fields := strings.Fields(use)
	inFlag := false
	for _, f := range fields[min(1, len(fields)):] {
		switch {
		case inFlag:
			inFlag = !strings.HasSuffix(f, "]")
		case f == "[flags]":
		case strings.HasPrefix(f, "[-"):
			inFlag = !strings.HasSuffix(f, "]")
		default:
			return f
		}
	}
	return ""
}

type completeFunc = func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective)

// completeSandboxes completes the first argument (every argument, with
// many) with the live sandboxes' ids and names, each followed by suffix
// (":" for the ID:/path of berth fs, with no space after it). Any failure
// completes nothing and says nothing: a completion is no place for errors.
func completeSandboxes(g *globals, many bool, suffix string) completeFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 && !many || suffix != "" && strings.Contains(prefix, ":") {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		directive := cobra.ShellCompDirectiveNoFileComp
		if suffix != "" {
			directive |= cobra.ShellCompDirectiveNoSpace
		}
		c, err := g.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
		defer cancel()
		sbs, err := c.ListSandboxes(ctx, false)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, sb := range sbs {
			desc := sb.State + " " + sb.Template
			if strings.HasPrefix(sb.ID, prefix) {
				out = append(out, cobra.CompletionWithDesc(compSafe(sb.ID)+suffix, compSafe(strings.TrimSpace(orDash(sb.Name)+" "+desc))))
			}
			if sb.Name != "" && strings.HasPrefix(sb.Name, prefix) {
				out = append(out, cobra.CompletionWithDesc(compSafe(sb.Name)+suffix, compSafe(sb.ID+" "+desc)))
			}
		}
		return out, directive
	}
}

// completeTemplates completes with the template names the caller sees
// (the first argument only, unless many); failures complete nothing.
func completeTemplates(g *globals, many bool) completeFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 && !many {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := g.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
		defer cancel()
		tpls, err := c.ListTemplates(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
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
