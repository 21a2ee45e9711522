package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/client"
)

func newCreateCmd(g *globals) *cobra.Command {
	var (
		sf       sandboxFlags
		pf       persistFlags
		name     string
		labels   []string
		snapshot string
		idemKey  string
		img      string
		insecure bool
		ra       registryAuthFlags
	)
	cmd := &cobra.Command{
		Use:   "create [flags]",
		Short: "Create a sandbox and print its id",
		Long: `Create a sandbox and print its id once it is running.

An ephemeral sandbox (the default) loses its files when it is deleted or times
out. --persistent gives it a workspace volume, mounted at /workspace, that
survives pause/resume, stop/start and daemon restarts (--persist-root keeps the
whole writable root layer too); 'berth rm' deletes the volume unless
--keep-volume was given. --volume attaches existing volumes ('berth volume').

Policies act on the sandbox without anyone asking: --idle-timeout pauses (or,
with --on-idle stop, stops) it after a time without API activity, exec sessions
or CPU use above --idle-cpu-threshold; --max-age stops or deletes it at an age;
--retention deletes it that long after it was stopped; --auto-resume wakes it
when an exec, file or port request reaches it paused or stopped. Durations are
seconds or like 30s, 10m, 1h30m, 7d.

--user sets who commands run as when 'berth exec' names no one (the template's
user, from its image's USER or its template file, by default; else root), and
/workspace belongs to that user. --network egress with --allow RULE gives the
sandbox egress to what the rules allow and nothing else; --public-port PORT is
served by the port proxy without credentials.

--snapshot SNAP starts the sandbox from a snapshot ('berth snapshot'): its
template, workspace and writable root; --template is not needed then.

--image REF starts it from a registry image instead of a template: the daemon
resolves REF to its digest, pulls it the first time (concurrent creates of one
image share one pull) and keeps it by digest as your template
"image@sha256:<hex>", so the next create of it starts without a pull. The
cache is bounded by serve --image-cache-size (least recently used images no
sandbox uses go first). --registry-user with --registry-password-stdin gives
this pull its own registry account. A tenant key needs a daemon run with
--tenant-pulls.

Every create carries an idempotency key, and a request that got no answer
(the daemon restarting) is retried with it, so it never makes two sandboxes.
--idempotency-key KEY chooses the key: a script that runs 'berth create' again
after a failure, with the same KEY and flags, gets the one sandbox (for 24
hours); with other flags it is refused.`,
		Example: `  id=$(berth create --memory 512m --timeout 1h)
  berth create --name dev --persistent --volume-size 10g --idle-timeout 15m --auto-resume
  berth create --persist-root --keep-volume --max-age 7d --on-max-age stop --retention 30d
  berth create --volume data:/data --volume models:/models:ro --label team=ml
  berth create --snapshot before-upgrade --name dev2 --persistent
  berth create --image registry.example.com/tasks/swe-1234:latest
  berth create --idempotency-key "job-$JOB_ID"
  berth create --user 1000 --workdir /workspace     # commands run as uid 1000, who owns /workspace
  berth create --network egress --allow 'tcp://*.pypi.org:443' --public-port 8080`,
		Args: cobra.NoArgs,
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		req, err := sf.request()
		if err != nil {
			return err
		}
		req.Name = name
		req.Snapshot = snapshot
		req.Image, req.ImageInsecure = img, insecure
		if req.RegistryAuth, err = ra.auth(cmd); err != nil {
			return err
		}
		if req.RegistryAuth != nil && img == "" {
			return fmt.Errorf("a registry account (--registry-user, --registry-token-stdin) goes with --image")
		}
		if err := pf.apply(&req, cmd.Flags().Changed("persistent")); err != nil {
			return err
		}
		if req.Labels, err = parseKV(labels, "label"); err != nil {
			return err
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		ctx := cmd.Context()
		if idemKey != "" {
			ctx = client.WithIdempotencyKey(ctx, idemKey)
		}
		sb, err := c.CreateSandbox(ctx, req)
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
	f.StringArrayVarP(&labels, "label", "l", nil, "label `K=V`; repeatable")
	f.StringVar(&idemKey, "idempotency-key", "", "`KEY` that makes a repeated create return the first one's sandbox (1-255 printable ASCII)")
	f.StringVar(&snapshot, "snapshot", "", "start from snapshot `SNAP` (its template, workspace and writable root) instead of a template")
	f.StringVar(&img, "image", "", "start from registry image `REF`, pulled on first use and cached by digest, instead of a template")
	f.BoolVar(&insecure, "image-insecure", false, "allow a plain-HTTP registry for --image")
	ra.register(cmd)
	sf.register(f, "hard lifetime of the sandbox; it is deleted when it runs out")
	pf.register(f)
	cmd.MarkFlagsMutuallyExclusive("snapshot", "template", "image")
	return cmd
}
