package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
)

func newTemplateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "template",
		Aliases: []string{"templates"},
		Short:   "Manage templates (the root filesystems sandboxes start from)",
	}
	cmd.AddCommand(newTemplateLsCmd(g), newTemplateInspectCmd(g), newTemplateImportCmd(g), newTemplateBuildCmd(g), newTemplateRmCmd(g),
		newTemplatePoolCmd(g))
	return cmd
}

func newTemplateLsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List templates",
		Args:    cobra.NoArgs,
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		ts, err := c.ListTemplates(cmd.Context())
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), ts)
		}
		now := time.Now()
		tw := newTable(cmd.OutOrStdout())
		// OWNER is the tenant whose template it is ("-": the host's
		// shared catalogue, which every tenant sees).
		fmt.Fprintln(tw, "NAME\tOWNER\tSOURCE\tBUILTIN\tSIZE\tLAYERS\tPOOL\tAGE")
		for _, t := range ts {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", t.Name, orDash(t.Tenant), orDash(t.Source), yesNo(t.Builtin),
				formatSize(t.Size), len(t.Layers), poolColumn(t.Pool), age(now, t.CreatedAt))
		}
		return tw.Flush()
	}
	return cmd
}

func newTemplateInspectCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inspect NAME",
		Short: "Show a template in detail",
		Args:  exactArgs(1, "a template name"),
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		t, err := c.GetTemplate(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		return printTemplate(cmd, out, t)
	}
	return cmd
}

// printTemplate prints the template an import or build produced: its name,
// or the API's JSON with -o json.
func printTemplate(cmd *cobra.Command, out *outputValue, t *api.Template) error {
	if out.json() {
		return printJSON(cmd.OutOrStdout(), t)
	}
	if cmd.Name() != "inspect" {
		_, err := fmt.Fprintln(cmd.OutOrStdout(), t.Name)
		return err
	}
	tw := newTable(cmd.OutOrStdout())
	fmt.Fprintf(tw, "Name:\t%s\nSource:\t%s\nBuiltin:\t%s\nSize:\t%s\nCreated:\t%s\n",
		t.Name, orDash(t.Source), yesNo(t.Builtin), formatSize(t.Size), t.CreatedAt.Local().Format(time.RFC3339))
	if t.Workdir != "" {
		fmt.Fprintf(tw, "Workdir:\t%s\n", t.Workdir)
	}
	if len(t.Env) > 0 {
		fmt.Fprintf(tw, "Env:\t%s\n", strings.Join(t.Env, " "))
	}
	if t.User != "" {
		fmt.Fprintf(tw, "User:\t%s\n", t.User)
	}
	if len(t.Entrypoint) > 0 {
		fmt.Fprintf(tw, "Entrypoint:\t%s\n", strings.Join(t.Entrypoint, " "))
	}
	if len(t.Cmd) > 0 {
		fmt.Fprintf(tw, "Cmd:\t%s\n", strings.Join(t.Cmd, " "))
	}
	if len(t.ExposedPorts) > 0 {
		fmt.Fprintf(tw, "Exposed ports:\t%s (not published)\n", strings.Join(t.ExposedPorts, " "))
	}
	if t.StopSignal != "" {
		fmt.Fprintf(tw, "Stop signal:\t%s\n", t.StopSignal)
	}
	if p := t.Pool; p != nil {
		fmt.Fprintf(tw, "Pool:\tmin=%d ready=%d starting=%d hits=%d misses=%d\n", p.Min, p.Ready, p.Starting, p.Hits, p.Misses)
	}
	for i, l := range t.Layers {
		fmt.Fprintf(tw, "Layer %d:\t%s\n", i+1, l)
	}
	return tw.Flush()
}

// looksLikePath tells a path the user meant from a registry reference.
func looksLikePath(s string) bool {
	return strings.HasPrefix(s, "/") || strings.HasPrefix(s, "./") || strings.HasPrefix(s, "../") ||
		s == "." || s == ".." || strings.HasSuffix(s, ".tar") || strings.HasSuffix(s, ".tar.gz")
}

func newTemplateImportCmd(g *globals) *cobra.Command {
	var (
		insecure, svcFromImage bool
		svcCmd, svcRestart     string
	)
	cmd := &cobra.Command{
		Use:   "import NAME PATH|REF",
		Short: "Import a template from an image tarball, an OCI layout or a registry",
		Long: `Import a template from:
  a local file        a docker-save or OCI tarball, uploaded to the daemon
  a local directory   an OCI image layout, read by the daemon (which must run on this host)
  anything else       a registry reference (alpine:3.20, ghcr.io/org/img@sha256:...)`,
		Example: `  docker save python:3.12-slim -o py.tar && berth template import py ./py.tar
  berth template import alpine alpine:3.20
  berth template import web nginx:1.27 --service-from-image --service-restart always`,
		Args: exactArgs(2, "a template name and a path or image reference"),
	}
	out := addOutputFlag(cmd)
	cmd.Flags().BoolVar(&insecure, "insecure", false, "allow a plain-HTTP or self-signed registry")
	cmd.Flags().StringVar(&svcCmd, "service", "", "run this command (split at spaces) as the sandboxes' supervised service")
	cmd.Flags().BoolVar(&svcFromImage, "service-from-image", false, "run the image's entrypoint and cmd as the sandboxes' supervised service")
	cmd.Flags().StringVar(&svcRestart, "service-restart", "", "the service's restart policy: always, on-failure (default) or never")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		name, src := args[0], args[1]
		var svc *api.TemplateService
		if svcCmd != "" || svcFromImage {
			svc = &api.TemplateService{Cmd: strings.Fields(svcCmd), FromImage: svcFromImage, Restart: svcRestart}
		} else if svcRestart != "" {
			return fmt.Errorf("--service-restart needs --service or --service-from-image")
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		var t *api.Template
		prog := newImportProgress(cmd.ErrOrStderr())
		defer prog.finish()
		fi, statErr := os.Stat(src)
		switch {
		case statErr == nil && fi.IsDir():
			abs, err := filepath.Abs(src)
			if err != nil {
				return err
			}
			t, err = c.ImportTemplateProgress(cmd.Context(), api.ImportTemplateRequest{Name: name, Path: abs, Insecure: insecure, Service: svc}, prog.report)
			if err != nil {
				return err
			}
		case statErr == nil:
			if svc != nil {
				return fmt.Errorf("a service cannot be set on an uploaded tarball: import an OCI layout directory or a registry reference, or apply a template file with a service")
			}
			f, err := os.Open(src)
			if err != nil {
				return err
			}
			defer f.Close()
			if t, err = c.UploadTemplateArchiveProgress(cmd.Context(), name, f, prog.report); err != nil {
				return err
			}
		case errors.Is(statErr, fs.ErrNotExist) && !looksLikePath(src):
			t, err = c.ImportTemplateProgress(cmd.Context(), api.ImportTemplateRequest{Name: name, Ref: src, Insecure: insecure, Service: svc}, prog.report)
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("cannot import %s: %w", src, unwrapPathError(statErr))
		}
		return printTemplate(cmd, out, t)
	}
	return cmd
}

func newTemplateBuildCmd(g *globals) *cobra.Command {
	var (
		from         string
		steps        []string
		env          []string
		timeout      durationValue
		svcFromImage bool
		svcCmd       string
		svcRestart   string
	)
	cmd := &cobra.Command{
		Use:   "build NAME --from BASE --run CMD...",
		Short: "Build a template by running setup steps on another",
		Long: `Build a template: start from BASE, run each --run step with /bin/sh -c in order,
and keep the result as NAME. Step output is shown on stderr; the template's
name is printed when the build succeeds. The base's supervised service is kept
unless --service (or --service-from-image: the base's entrypoint and cmd)
gives the new template its own; a bad service is refused before any step runs.`,
		Example: `  berth template build tools --from base --run 'mkdir -p /opt/tools' --env TOOLS=/opt/tools
  berth template build web --from base --run 'mkdir -p /srv && echo hi > /srv/index.html' \
      --service 'python3 -m http.server 8000 -d /srv' --service-restart always`,
		Args: exactArgs(1, "a template name"),
	}
	out := addOutputFlag(cmd)
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "template to start from (required)")
	f.StringArrayVar(&steps, "run", nil, "shell step to run; repeatable, run in order (required)")
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable `K=V` for the steps; repeatable")
	f.Var(&timeout, "timeout", "time limit per step (e.g. 10m, or seconds)")
	f.StringVar(&svcCmd, "service", "", "run this command (split at spaces) as the sandboxes' supervised service")
	f.BoolVar(&svcFromImage, "service-from-image", false, "run the base template's entrypoint and cmd as the sandboxes' supervised service")
	f.StringVar(&svcRestart, "service-restart", "", "the service's restart policy: always, on-failure (default) or never")
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("run")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		envMap, err := parseEnv(env, os.LookupEnv)
		if err != nil {
			return err
		}
		var svc *api.TemplateService
		if svcCmd != "" || svcFromImage {
			svc = &api.TemplateService{Cmd: strings.Fields(svcCmd), FromImage: svcFromImage, Restart: svcRestart}
		} else if svcRestart != "" {
			return fmt.Errorf("--service-restart needs --service or --service-from-image")
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		t, err := c.BuildTemplate(cmd.Context(), api.BuildTemplateRequest{
			Name: args[0], From: from, Run: steps, Env: envMap, TimeoutSeconds: timeout.seconds(), Service: svc,
		}, cmd.ErrOrStderr())
		if err != nil {
			return fmt.Errorf("build %s: %w", args[0], err)
		}
		return printTemplate(cmd, out, t)
	}
	return cmd
}

func newTemplateRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"delete"},
		Short:   "Delete templates",
		Args:    minArgs(1, "at least one template name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			return eachArg(cmd, args, func(name string) error {
				if err := c.DeleteTemplate(cmd.Context(), name); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), name)
				return nil
			})
		},
	}
}
