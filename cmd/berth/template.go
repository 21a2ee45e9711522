package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

func newTemplateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "template",
		Aliases: []string{"templates"},
		Short:   "Manage templates (the root filesystems sandboxes start from)",
	}
	cmd.AddCommand(newTemplateLsCmd(g), newTemplateInspectCmd(g), newTemplateImportCmd(g), newTemplateBuildCmd(g), newTemplateRmCmd(g),
		newTemplatePoolCmd(g), newTemplatePushCmd(g))
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
	printBuild(tw, t.Build)
	return tw.Flush()
}

// printBuild prints a template's build record: each step, and the flows
// of those that had a network.
func printBuild(w io.Writer, b *api.TemplateBuild) {
	if b == nil {
		return
	}
	for _, st := range b.Steps {
		where := ""
		if st.Line > 0 {
			where = fmt.Sprintf(" (line %d)", st.Line)
		}
		state := ""
		if st.Cached {
			state = " [cached]"
		}
		fmt.Fprintf(w, "Build step %d:\t%s%s%s\n", st.Step, st.Desc, where, state)
		if st.Network == "egress" {
			fmt.Fprintf(w, "  network:\tegress, allow %s; %d flows\n", orDash(strings.Join(st.Allow, ", ")), st.FlowCount)
		}
		for _, f := range st.Flows {
			name := ""
			if f.Name != "" {
				name = " " + f.Name
			}
			fmt.Fprintf(w, "  %s:\t%s %s %s%s (%s)\n", f.Decision, f.Kind, f.Proto, f.Dst, name, f.Rule)
		}
		if st.FlowsDropped > 0 {
			fmt.Fprintf(w, "  ...\t%d more flows not kept\n", st.FlowsDropped)
		}
	}
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
  echo "$PW" | berth template import app ghcr.io/team/app:1 --registry-user bot --registry-password-stdin
  berth template import web nginx:1.27 --service-from-image --service-restart always`,
		Args: exactArgs(2, "a template name and a path or image reference"),
	}
	out := addOutputFlag(cmd)
	cmd.Flags().BoolVar(&insecure, "insecure", false, "allow a plain-HTTP registry")
	var regAuth registryAuthFlags
	regAuth.register(cmd)
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
			ra, err := regAuth.auth(cmd)
			if err != nil {
				return err
			}
			t, err = c.ImportTemplateProgress(cmd.Context(), api.ImportTemplateRequest{Name: name, Ref: src, Insecure: insecure,
				RegistryAuth: ra, Service: svc}, prog.report)
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
		network      string
		allow        []string
		file         string
		target       string
		buildArgs    []string
	)
	cmd := &cobra.Command{
		Use:   "build NAME --from BASE --run CMD... | build NAME -f Dockerfile [CONTEXT]",
		Short: "Build a template by running setup steps on another, or from a Dockerfile",
		Long: `Build a template: start from BASE, run each --run step with /bin/sh -c in order,
and keep the result as NAME. Step output is shown on stderr; the template's
name is printed when the build succeeds. The base's supervised service is kept
unless --service (or --service-from-image: the base's entrypoint and cmd)
gives the new template its own; a bad service is refused before any step runs.

The steps have no network (loopback only) unless --network egress names one:
then they reach only what --allow rules allow, under the same egress policy
and flow log as a sandbox's. A step the policy stopped fails naming the
denied flows; the flows are kept in the template's build record
(berth template inspect NAME).

With -f, build from a Dockerfile: CONTEXT (default: the current directory)
is sent to the daemon as a tar archive, less what its .dockerignore excludes.
FROM names a template (berth template ls) or an image reference, or an
earlier stage; RUN, COPY and ADD (from the context; not URLs or archives)
are layers, each cached by everything it depends on; ENV, ARG (--build-arg),
WORKDIR, USER, EXPOSE, CMD, ENTRYPOINT, LABEL, SHELL, STOPSIGNAL and
COPY --from=STAGE work as docker's. Instructions berth does not carry out
(HEALTHCHECK, VOLUME, ONBUILD, RUN --mount, heredocs) are refused with their
line. The image's CMD and ENTRYPOINT are what berth run runs with no command.`,
		Example: `  berth template build tools --from base --run 'mkdir -p /opt/tools' --env TOOLS=/opt/tools
  berth template build web --from base --run 'mkdir -p /srv && echo hi > /srv/index.html' \
      --service 'python3 -m http.server 8000 -d /srv' --service-restart always
  berth template build py-deps --from py --network egress \
      --allow pypi.org:443 --allow files.pythonhosted.org:443 --run 'pip install numpy'
  berth template build app -f Dockerfile . --build-arg VERSION=1.2 --network egress --allow pypi.org:443`,
		Args: cobra.RangeArgs(1, 2),
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
	f.StringVar(&network, "network", "", "the steps' network mode: none (default, loopback only) or egress")
	f.StringArrayVar(&allow, "allow", nil, "egress `RULE` for --network egress: [tcp://|udp://]IP|CIDR|DOMAIN|*.DOMAIN[:PORT[,PORT]]; repeatable; all else is denied")
	f.StringVarP(&file, "file", "f", "", "build from this Dockerfile (the build context is CONTEXT, default .)")
	f.StringVar(&target, "target", "", "with -f: the stage to build (default: the last)")
	f.StringArrayVar(&buildArgs, "build-arg", nil, "with -f: build argument `K=V` for the Dockerfile's ARGs; repeatable")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if file != "" {
			if from != "" || len(steps) > 0 || len(env) > 0 || svcCmd != "" || svcFromImage {
				return fmt.Errorf("-f builds from a Dockerfile: --from, --run, --env and --service do not go with it")
			}
			return buildDockerfile(cmd, g, out, args, file, target, buildArgs, network, allow, timeout.seconds())
		}
		if len(args) != 1 {
			return fmt.Errorf("a build context is given with -f Dockerfile only")
		}
		if from == "" || len(steps) == 0 {
			return fmt.Errorf("give --from BASE and at least one --run CMD, or -f Dockerfile")
		}
		if target != "" || len(buildArgs) > 0 {
			return fmt.Errorf("--target and --build-arg go with -f Dockerfile")
		}
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
			Network: network, Allow: allow,
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

// buildDockerfile is `template build NAME -f Dockerfile [CONTEXT]`: the
// context is packed as a tar archive while it is sent.
func buildDockerfile(cmd *cobra.Command, g *globals, out *outputValue, args []string, file, target string, buildArgs []string,
	network string, allow []string, timeoutSecs float64) error {
	dir := "."
	if len(args) == 2 {
		dir = args[1]
	}
	bargs := map[string]string{}
	for _, kv := range buildArgs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			// docker's rule: a bare name takes its value from the environment.
			if v, ok = os.LookupEnv(k); !ok {
				continue
			}
		}
		if k == "" {
			return fmt.Errorf("--build-arg %q: want K=V", kv)
		}
		bargs[k] = v
	}
	// The Dockerfile's name in the archive is known before sending.
	dfName, err := contextDockerfileName(dir, file)
	if err != nil {
		return err
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	pr, pw := io.Pipe()
	go func() {
		_, err := packContext(pw, dir, file)
		pw.CloseWithError(err)
	}()
	defer pr.Close()
	t, err := c.BuildDockerfile(cmd.Context(), args[0], pr, client.DockerfileOptions{Dockerfile: dfName, Target: target,
		BuildArgs: bargs, Network: network, Allow: allow, TimeoutSeconds: timeoutSecs}, cmd.ErrOrStderr())
	if err != nil {
		return fmt.Errorf("build %s: %w", args[0], err)
	}
	return printTemplate(cmd, out, t)
}
