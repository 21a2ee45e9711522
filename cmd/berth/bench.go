//go:build !berthcli

package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/internal/bench"
)

func newBenchCmd() *cobra.Command {
	var (
		opts      bench.Options
		churn     float64
		strict    bool
		forkSizes []string
		netBytes  string
		imageBase string
	)
	cmd := &cobra.Command{
		Use:   "bench [--iterations N] [--idle N] [--churn-seconds S] [--expiry N] [--fork-sizes 10m,100m,1g] [--net-bytes 256m] [--only a,b,...] [-o json]",
		Short: "Measure berth's performance beside raw runc on this host",
		Long: `Measure berth on this host and print each figure (p50, p95, n) beside a peer
measured in the same run: raw runc, the same binary, with an equivalent bundle
(same overlay root, host /usr bind, user namespace id map, seccomp profile,
resources and cgroup layout).

The bench starts its own private daemon (a temporary data dir under /tmp, its
own socket, cgroup parent and runc root), so it neither needs nor touches a
running "berth serve". At the end it deletes its sandboxes, checks doctor,
stops the daemon and removes everything it created. It must run as root.

Measurements (--only takes these names, or the letters a-p):
  tti      time to interactive: create + first exec of true, vs runc run true
  exec     exec round trip of true through the SDK, vs runc exec true
  run      one-shot "berth run -- true" (CLI wall time), vs runc run true
  churn    create/exec/delete cycles per second from concurrent clients
  density  memory per idle sandbox, daemon RSS, exec round trip and delete time
           with --idle sandboxes running
  pause    pause and resume of a running persistent sandbox through the SDK,
           vs runc pause / runc resume of a running sleep
  restart  stop -> start -> first exec of a persistent sandbox (persist_root,
           a few MiB written to /workspace), vs a fresh create -> first exec
           of the same request
  expiry   lag from idle deadline to completed pause with --expiry sandboxes
           expiring together (and to completed stop with --expiry-stop N)
  fork     fork (count 1, until the child runs) of a persistent parent whose
           workspace holds each of --fork-sizes (10k files per GiB), and the
           parent's freeze time, vs a full copy of its volume image
           (cp --reflink=never + fsync, same filesystem)
  pool     warm-pool claim -> first exec result, vs a cold create -> first exec
  snapshot snapshot and restore (running -> running) of the same parents, vs
           the full copy and a stop -> start of the same sandbox
  runsc    create -> first exec on gVisor beside runc, and hibernate / wake of
           a runsc sandbox holding each of --hibernate-sizes (100 MiB and 1 GiB;
           skipped without runsc)
  egress   create -> first exec in network mode egress vs mode none, and the
           extra time of egress (target p50 <= 15 ms)
  compute  create -> first command result (true; node -v too in the burst when
           the host has node) in three arrival patterns: --iterations one
           after another, --iterations staggered 200 ms apart, and --burst at
           once (default 100); p50/p95/p99, success count and wall time, vs
           raw runc run true under the same arrivals, beside the published
           figures of hosted platforms (ComputeSDK, Oct 2026)
  nat      TCP throughput (--net-bytes per transfer) from an egress sandbox
           through berth's bridge and NAT to a test host, vs the same
           transfer over a plain veth pair
  images   --images per-task images (default 200) sharing a base of
           --image-base-size (default 300m), each with a small task layer,
           pushed to a test registry, then made into sandboxes with
           create --image: create -> first command from an image not yet
           pulled (nothing cached; base cached) vs cp -a of the same bytes,
           from a cached image vs a local template, import throughput, and
           host storage vs the bytes of the distinct layers (needs the
           registry of scripts/install-registry.sh and busybox-static)

egress, nat and images never send a packet off this machine: images runs the
CNCF distribution registry in a bench-made network namespace reached by
address over a veth pair, with a CA and account made for the run. egress and
nat run a second private daemon inside a network namespace the bench makes
(nsenter --net), whose only link is a veth into another bench-made namespace
holding the test host (198.51.100.2, a documentation address) and a TCP sink;
the peer's sender is a third namespace on a plain veth to the same sink. The
namespaces have no route to the real network and are deleted at the end.

The exit code is 0 when the bench ran and cleaned up, whether or not every
target was met (use --strict to fail on a missed target).`,
		Example: `  berth bench
  berth bench --iterations 10 --idle 20 --churn-seconds 3
  berth bench --only tti,exec -o json
  berth bench --only compute --burst 200
  berth bench --only pause,restart,expiry --expiry 50
  berth bench --only fork,pool,snapshot --fork-sizes 10m,100m
  berth bench --only egress,nat --net-bytes 64m
  berth bench --only images --images 50 --image-base-size 100m`,
		Args: cobra.NoArgs,
	}
	out := addOutputFlag(cmd)
	f := cmd.Flags()
	f.IntVar(&opts.Iterations, "iterations", bench.DefaultIterations, "samples of each latency")
	f.IntVar(&opts.Burst, "burst", bench.DefaultBurst, "creates the compute measurement starts at once")
	f.IntVar(&opts.Idle, "idle", bench.DefaultIdle, "idle sandboxes the density measurement keeps running")
	f.Float64Var(&churn, "churn-seconds", bench.DefaultChurn.Seconds(), "how long the churn measurement runs, in seconds")
	f.IntVar(&opts.Concurrency, "concurrency", bench.DefaultConcurrency, "concurrent clients in churn, in the density creates and deletes and in the expiry creates and touches")
	f.IntVar(&opts.Expiry, "expiry", bench.DefaultExpiry, "sandboxes the expiry measurement lets expire together (on_idle pause)")
	f.IntVar(&opts.ExpiryStop, "expiry-stop", 0, "sandboxes the expiry measurement then lets expire together with on_idle stop (0: skip, -1: as many as --expiry)")
	f.StringSliceVar(&forkSizes, "fork-sizes", []string{"10m", "100m", "1g"}, "workspace sizes of the parents that fork and snapshot measure")
	var hibernateSizes []string
	f.StringSliceVar(&hibernateSizes, "hibernate-sizes", []string{"100m", "1g"}, "memory a runsc sandbox holds in the hibernate and wake measurement")
	f.IntVar(&opts.ForkIterations, "fork-iterations", 0, "samples of each fork, snapshot and restore size (0: --iterations, at most 10)")
	f.StringVar(&netBytes, "net-bytes", "256m", "bytes each transfer of the nat measurement sends")
	f.IntVar(&opts.Images, "images", bench.DefaultImages, "per-task images the images measurement pulls")
	f.StringVar(&imageBase, "image-base-size", "300m", "size of the base layer the images measurement's images share")
	f.StringSliceVar(&opts.Only, "only", nil, "run only these measurements: compute, tti, exec, run, churn, density, pause, restart, expiry, fork, pool, snapshot, runsc, egress, nat, images (or a-p)")
	f.StringArrayVar(&opts.ServeArgs, "serve-arg", nil, "a flag for the measured daemon's berth serve, e.g. --serve-arg=--max-starts=-1 (repeat for more)")
	f.StringVar(&opts.Runc, "runc", "runc", "runc binary for the daemon's peer (`PATH` or name looked up in $PATH)")
	f.BoolVar(&strict, "strict", false, "exit 1 when a target is missed")
	var reportDir string
	f.StringVar(&reportDir, "report", "", "also write the results into `DIR`: report.md (the table as Markdown) and PNG charts of each measure's latency distribution beside its peer's")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if opts.Iterations < 1 || opts.Idle < 1 || churn <= 0 || opts.Concurrency < 1 || opts.Expiry < 1 {
			return fmt.Errorf("--iterations, --idle, --churn-seconds, --concurrency and --expiry must be positive")
		}
		opts.Churn = time.Duration(churn * float64(time.Second))
		for _, s := range forkSizes {
			sz, err := parseSize(s)
			if err != nil {
				return fmt.Errorf("--fork-sizes: %w", err)
			}
			opts.ForkSizes = append(opts.ForkSizes, sz)
		}
		for _, s := range hibernateSizes {
			sz, err := parseSize(s)
			if err != nil {
				return fmt.Errorf("--hibernate-sizes: %w", err)
			}
			opts.HibernateSizes = append(opts.HibernateSizes, sz)
		}
		nb, err := parseSize(netBytes)
		if err != nil {
			return fmt.Errorf("--net-bytes: %w", err)
		}
		opts.NetBytes = nb
		if opts.ImageBase, err = parseSize(imageBase); err != nil {
			return fmt.Errorf("--image-base-size: %w", err)
		}
		if opts.ForkIterations < 0 {
			return fmt.Errorf("--fork-iterations must not be negative")
		}
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		rep, err := bench.Run(ctx, opts, cmd.ErrOrStderr())
		if rep != nil && (err == nil || len(rep.Rows) > 0) {
			w := cmd.OutOrStdout()
			var perr error
			if out.json() {
				perr = printJSON(w, rep)
			} else {
				perr = bench.WriteTable(w, rep)
			}
			if err == nil {
				err = perr
			}
			if reportDir != "" {
				if rerr := bench.WriteReport(reportDir, rep); rerr != nil {
					err = errors.Join(err, fmt.Errorf("--report: %w", rerr))
				} else {
					fmt.Fprintf(cmd.ErrOrStderr(), "report written to %s\n", filepath.Join(reportDir, "report.md"))
				}
			}
		}
		if err != nil {
			return err
		}
		if strict && rep.Failed > 0 {
			return fmt.Errorf("%d target(s) missed", rep.Failed)
		}
		return nil
	}
	return cmd
}
