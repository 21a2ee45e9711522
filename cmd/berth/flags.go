package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/berth-sh/berth/api"
)

// parseDuration accepts Go durations ("30s", "1h30m") and plain seconds
// ("30", "1.5"). Negative durations are rejected; "0" means none.
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty duration")
	}
	var d time.Duration
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(secs) || math.IsInf(secs, 0) || secs > math.MaxInt64/float64(time.Second) {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		d = time.Duration(secs * float64(time.Second))
	} else {
		d, err = time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q: use seconds or Go syntax like 30s, 5m, 1h30m", s)
		}
	}
	if d < 0 {
		return 0, fmt.Errorf("invalid duration %q: must not be negative", s)
	}
	return d, nil
}

// sizeUnits are binary, as for docker's --memory: k, m and g mean KiB, MiB
// and GiB, and the long spellings are accepted too.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kb": 1 << 10, "ki": 1 << 10, "kib": 1 << 10,
	"m": 1 << 20, "mb": 1 << 20, "mi": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gb": 1 << 30, "gi": 1 << 30, "gib": 1 << 30,
	"t": 1 << 40, "tb": 1 << 40, "ti": 1 << 40, "tib": 1 << 40,
}

// parseSize parses a byte size: plain bytes ("1048576"), or a number with a
// binary unit ("256m", "1g", "512MiB", "1.5GiB"); case does not matter.
func parseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	mult, ok := sizeUnits[unit]
	if num == "" || !ok {
		return 0, fmt.Errorf("invalid size %q: use bytes or a unit like 512m, 1g, 256MiB", s)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	b := v * float64(mult)
	if b >= math.MaxInt64 {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return int64(b), nil
}

// formatSize prints bytes in the largest binary unit that keeps it short.
func formatSize(b int64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%dB", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit && exp < 3; n /= unit {
		div *= unit
		exp++
	}
	v := float64(b) / float64(div)
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + string("KMGT"[exp]) + "iB"
}

// parseKV parses K=V pairs (labels) into a map. A later pair wins.
func parseKV(pairs []string, what string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("invalid %s %q: want KEY=VALUE", what, p)
		}
		m[k] = v
	}
	return m, nil
}

// parseEnv parses --env values: K=V, or K alone to pass the local value of
// K, as docker does.
func parseEnv(pairs []string, lookup func(string) (string, bool)) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if k == "" || strings.ContainsAny(k, " \t\n") {
			return nil, fmt.Errorf("invalid env %q: want NAME=VALUE", p)
		}
		if !ok {
			if v, ok = lookup(k); !ok {
				return nil, fmt.Errorf("env %s is not set locally: use --env %s=VALUE", k, k)
			}
		}
		m[k] = v
	}
	return m, nil
}

// durationValue is a pflag.Value for parseDuration.
type durationValue time.Duration

func (d *durationValue) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}
func (d *durationValue) Type() string { return "duration" }
func (d *durationValue) String() string {
	if *d == 0 {
		return ""
	}
	return time.Duration(*d).String()
}
func (d *durationValue) seconds() float64 { return time.Duration(*d).Seconds() }

// sizeValue is a pflag.Value for parseSize.
type sizeValue int64

func (s *sizeValue) Set(v string) error {
	b, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeValue(b)
	return nil
}
func (s *sizeValue) Type() string { return "size" }
func (s *sizeValue) String() string {
	if *s == 0 {
		return ""
	}
	return formatSize(int64(*s))
}

// networkValue accepts the network modes of a sandbox.
type networkValue string

func (n *networkValue) Set(v string) error {
	switch v {
	case "none", "egress":
		*n = networkValue(v)
		return nil
	}
	return fmt.Errorf("invalid network %q: want none or egress", v)
}
func (n *networkValue) Type() string   { return "none|egress" }
func (n *networkValue) String() string { return string(*n) }

// sandboxFlags are the flags run and create share.
type sandboxFlags struct {
	template string
	timeout  durationValue
	env      []string
	cpus     float64
	memory   sizeValue
	pids     int64
	network  networkValue
	workdir  string
}

func (f *sandboxFlags) register(fs *pflag.FlagSet, timeoutHelp string) {
	fs.StringVar(&f.template, "template", "", "template to create the sandbox from (default: the daemon's default template)")
	fs.Var(&f.timeout, "timeout", timeoutHelp+" (e.g. 30s, 5m, or seconds)")
	fs.StringArrayVarP(&f.env, "env", "e", nil, "environment variable `K=V` (or K to pass the local value); repeatable")
	fs.Float64Var(&f.cpus, "cpus", 0, "CPU limit in cores (e.g. 0.5, 2)")
	fs.Var(&f.memory, "memory", "memory limit (e.g. 256m, 1g, 512MiB)")
	fs.Int64Var(&f.pids, "pids", 0, "limit on the number of processes")
	fs.Var(&f.network, "network", "network mode: none or egress")
	fs.StringVarP(&f.workdir, "workdir", "w", "", "working directory inside the sandbox")
}

// request builds the create request these flags describe.
func (f *sandboxFlags) request() (api.CreateSandboxRequest, error) {
	env, err := parseEnv(f.env, os.LookupEnv)
	if err != nil {
		return api.CreateSandboxRequest{}, err
	}
	if f.cpus < 0 || f.pids < 0 {
		return api.CreateSandboxRequest{}, fmt.Errorf("--cpus and --pids must not be negative")
	}
	return api.CreateSandboxRequest{
		Template: f.template,
		Resources: api.Resources{
			CPUs:        f.cpus,
			MemoryBytes: int64(f.memory),
			Pids:        f.pids,
		},
		Env:            env,
		TimeoutSeconds: f.timeout.seconds(),
		Network:        string(f.network),
		Workdir:        f.workdir,
	}, nil
}
