package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
)

// parseRate reads "N/s" or "N/m" (an integer count a second or a minute),
// optionally followed by ",BURST": e.g. "10/s,20", "30/m". It returns the
// count, the period and the burst (0 when not given). "0" alone is no limit.
func parseRate(s string) (n int64, per time.Duration, burst int64, err error) {
	bad := func() (int64, time.Duration, int64, error) {
		return 0, 0, 0, fmt.Errorf("invalid rate %q: want N/s or N/m, optionally ,BURST (e.g. 10/s,20)", s)
	}
	if s == "0" {
		return 0, time.Second, 0, nil
	}
	rate, b, hasBurst := strings.Cut(s, ",")
	num, unit, ok := strings.Cut(rate, "/")
	if !ok {
		return bad()
	}
	switch unit {
	case "s":
		per = time.Second
	case "m":
		per = time.Minute
	default:
		return bad()
	}
	if n, err = parseCount(num); err != nil {
		return bad()
	}
	if hasBurst {
		if burst, err = parseCount(b); err != nil || burst == 0 {
			return bad()
		}
	}
	return n, per, burst, nil
}

// parseCount is a non-negative decimal integer of at most 9 digits.
func parseCount(s string) (int64, error) {
	if s == "" || len(s) > 9 {
		return 0, fmt.Errorf("bad count %q", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("bad count %q", s)
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

func newQuotaCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Show your tenant's quota, or show and set any tenant's (host admin)",
		Long: `A tenant's quota limits its live sandboxes, their CPUs, memory and storage
(disk caps and volume sizes, as reserved, and the unpacked layers of its own
templates: file bytes and 512 bytes a member), its create rate, and the
request rate of each of its API keys. 0 is unlimited. Over a limit, a create
answers 429 quota_exceeded naming the limit, with Retry-After; nothing is
left of it. A template import or build is charged as its layers unpack and
refused at the first file past the storage left.`,
	}
	cmd.AddCommand(newQuotaGetCmd(g), newQuotaSetCmd(g))
	return cmd
}

func newQuotaGetCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get [TENANT]",
		Short: "Show a tenant's limits and what it uses (without TENANT: your own tenant's)",
		Long: `Without TENANT, the limits and usage of the tenant whose API key you use
(GET /v1/quota; any key may). With TENANT, that tenant's (host admin only).`,
		Args: cobra.MaximumNArgs(1),
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		var q *api.Quota
		if len(args) == 0 {
			q, err = c.GetOwnQuota(cmd.Context())
		} else {
			q, err = c.GetQuota(cmd.Context(), args[0])
		}
		if err != nil {
			return err
		}
		return printQuota(cmd, out, q)
	}
	return cmd
}

func printQuota(cmd *cobra.Command, out *outputValue, q *api.Quota) error {
	w := cmd.OutOrStdout()
	if out.json() {
		return printJSON(w, q)
	}
	lim := func(v int64, f func(int64) string) string {
		if v == 0 {
			return "unlimited"
		}
		return f(v)
	}
	num := func(v int64) string { return strconv.FormatInt(v, 10) }
	u := q.Usage
	if u == nil {
		u = &api.QuotaUsage{}
	}
	src := "own"
	if q.Default {
		src = "daemon default"
	}
	name := q.Tenant
	if name == "" {
		name = "(the default tenant)"
	}
	fmt.Fprintf(w, "Tenant: %s (%s quota)\n", name, src)
	tw := newTable(w)
	fmt.Fprintln(tw, "LIMIT\tUSED\tMAX")
	fmt.Fprintf(tw, "sandboxes\t%d\t%s\n", u.Sandboxes, lim(q.MaxSandboxes, num))
	cpuLim := "unlimited"
	if q.MaxCPUs > 0 {
		cpuLim = strconv.FormatFloat(q.MaxCPUs, 'f', -1, 64)
	}
	fmt.Fprintf(tw, "cpus\t%s\t%s\n", strconv.FormatFloat(u.CPUs, 'f', -1, 64), cpuLim)
	fmt.Fprintf(tw, "memory\t%s\t%s\n", formatSize(u.Memory), lim(q.MaxMemory, formatSize))
	fmt.Fprintf(tw, "storage\t%s\t%s\n", formatSize(u.Storage), lim(q.MaxStorage, formatSize))
	fmt.Fprintf(tw, "create rate\t-\t%s\n", lim(q.CreateRate, func(v int64) string { return fmt.Sprintf("%d/m,%d", v, max(q.CreateBurst, 1, v)) }))
	fmt.Fprintf(tw, "key rate\t-\t%s\n", lim(q.KeyRate, func(v int64) string { return fmt.Sprintf("%d/s,%d", v, max(q.KeyBurst, 1, v)) }))
	return tw.Flush()
}

func newQuotaSetCmd(g *globals) *cobra.Command {
	var sandboxes int64
	var cpus float64
	var memory, storage sizeValue
	var createRate, keyRate string
	cmd := &cobra.Command{
		Use:   "set TENANT [--sandboxes N] [--cpus N] [--memory SIZE] [--storage SIZE] [--create-rate N/m[,BURST]] [--key-rate N/s[,BURST]]",
		Short: "Set a tenant's limits (the ones not given are kept; 0 lifts one)",
		Args:  exactArgs(1, "a tenant"),
	}
	out := addOutputFlag(cmd)
	f := cmd.Flags()
	f.Int64Var(&sandboxes, "sandboxes", 0, "live sandboxes at once (0: unlimited)")
	f.Float64Var(&cpus, "cpus", 0, "sum of the sandboxes' CPUs, in cores (0: unlimited)")
	f.Var(&memory, "memory", "sum of the sandboxes' memory limits, e.g. 16g (0: unlimited)")
	f.Var(&storage, "storage", "sum of disk caps, volume sizes and own template layers, e.g. 500g (0: unlimited)")
	f.StringVar(&createRate, "create-rate", "", "creates a minute, N/m or N/m,BURST (0: unlimited)")
	f.StringVar(&keyRate, "key-rate", "", "API requests a second per key, N/s or N/s,BURST (0: the daemon's --rate-limit)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if cpus < 0 || math.IsNaN(cpus) || sandboxes < 0 {
			return fmt.Errorf("--cpus and --sandboxes must not be negative")
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		cur, err := c.GetQuota(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		req := cur.QuotaRequest
		ch := cmd.Flags().Changed
		if ch("sandboxes") {
			req.MaxSandboxes = sandboxes
		}
		if ch("cpus") {
			req.MaxCPUs = cpus
		}
		if ch("memory") {
			req.MaxMemory = int64(memory)
		}
		if ch("storage") {
			req.MaxStorage = int64(storage)
		}
		if ch("create-rate") {
			n, per, b, err := parseRate(createRate)
			if err != nil {
				return err
			}
			if n != 0 && per != time.Minute {
				return fmt.Errorf("--create-rate %q: give it a minute, N/m", createRate)
			}
			req.CreateRate, req.CreateBurst = n, b
		}
		if ch("key-rate") {
			n, per, b, err := parseRate(keyRate)
			if err != nil {
				return err
			}
			if n != 0 && per != time.Second {
				return fmt.Errorf("--key-rate %q: give it a second, N/s", keyRate)
			}
			req.KeyRate, req.KeyBurst = n, b
		}
		q, err := c.SetQuota(cmd.Context(), args[0], req)
		if err != nil {
			return err
		}
		return printQuota(cmd, out, q)
	}
	return cmd
}
