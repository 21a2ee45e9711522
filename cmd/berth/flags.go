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
		// Go syntax, plus a leading number of days: 7d, 1d12h.
		rest, days := s, 0.0
		if i := strings.IndexByte(s, 'd'); i > 0 {
			if days, err = strconv.ParseFloat(s[:i], 64); err != nil || days < 0 || days > 100*365 {
				return 0, fmt.Errorf("invalid duration %q: use seconds or Go syntax like 30s, 5m, 1h30m, 7d", s)
			}
			if rest = s[i+1:]; strings.HasPrefix(rest, "-") || strings.HasPrefix(rest, "+") {
				return 0, fmt.Errorf("invalid duration %q: use seconds or Go syntax like 30s, 5m, 1h30m, 7d", s)
			}
		}
		if rest != "" {
			if d, err = time.ParseDuration(rest); err != nil {
				return 0, fmt.Errorf("invalid duration %q: use seconds or Go syntax like 30s, 5m, 1h30m, 7d", s)
			}
		}
		d += time.Duration(days * float64(24*time.Hour))
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
	disk     sizeValue
	network  networkValue
	workdir  string
	runtime  string
	user     string
	allow    []string
	public   []int
	secrets  []string
	sudo     bool
}

func (f *sandboxFlags) register(fs *pflag.FlagSet, timeoutHelp string) {
	fs.StringVar(&f.template, "template", "", "template to create the sandbox from (default: the daemon's default template)")
	fs.Var(&f.timeout, "timeout", timeoutHelp+" (e.g. 30s, 5m, or seconds)")
	fs.StringArrayVarP(&f.env, "env", "e", nil, "environment variable `K=V` (or K to pass the local value); repeatable")
	fs.Float64Var(&f.cpus, "cpus", 0, "CPU limit in cores (e.g. 0.5, 2)")
	fs.Var(&f.memory, "memory", "memory limit (e.g. 256m, 1g, 512MiB)")
	fs.Int64Var(&f.pids, "pids", 0, "limit on the number of processes")
	fs.Var(&f.disk, "disk", "cap of the writable root layer and /tmp together, e.g. 64m, 20g (default: the template's or the daemon's --disk-default); writes past it fail with ENOSPC")
	fs.Var(&f.network, "network", "network mode: none or egress")
	fs.StringVarP(&f.workdir, "workdir", "w", "", "working directory inside the sandbox")
	fs.StringVar(&f.runtime, "runtime", "", "runtime class: runc or runsc (gVisor; when the daemon offers it); default: the daemon's")
	fs.StringVarP(&f.user, "user", "u", "", "default user of the sandbox's commands and owner of /workspace: `uid[:gid]` or a name from its /etc/passwd (default: the template's user, else root)")
	fs.StringArrayVar(&f.allow, "allow", nil, "egress `RULE` for --network egress: [tcp://|udp://]IP|CIDR|DOMAIN|*.DOMAIN[:PORT[,PORT]]; repeatable; all else is denied")
	fs.IntSliceVar(&f.public, "public-port", nil, "sandbox `PORT` the port proxy serves without credentials; repeatable or comma-separated")
	fs.BoolVar(&f.sudo, "sudo", false, "give the sandbox a passwordless sudo for root and its --user (as E2B's templates have): commands run as the sandbox's root, as exec --user root does")
	fs.StringArrayVar(&f.secrets, "secret", nil, "give the sandbox your secret `NAME[=env:VAR|=file:/run/secrets/F|=egress:HOST]`: env var VAR (default NAME) of every exec, file F (0400, the sandbox user's) on a tmpfs written at every start, or (--network egress) a placeholder in env var NAME that the egress proxy replaces by the value in HTTPS request headers to HOST only; see 'berth secret'; repeatable")
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
	refs, err := parseSecretFlags(f.secrets)
	if err != nil {
		return api.CreateSandboxRequest{}, err
	}
	return api.CreateSandboxRequest{
		Template: f.template,
		Resources: api.Resources{
			CPUs:        f.cpus,
			MemoryBytes: int64(f.memory),
			Pids:        f.pids,
			DiskBytes:   int64(f.disk),
		},
		Env:            env,
		TimeoutSeconds: f.timeout.seconds(),
		Network:        string(f.network),
		Workdir:        f.workdir,
		Runtime:        f.runtime,
		User:           f.user,
		Allow:          f.allow,
		PublicPorts:    f.public,
		Secrets:        refs,
		Sudo:           f.sudo,
	}, nil
}

// parseVolumeSpec parses a --volume value: NAME[:PATH[:ro|rw]]. An empty PATH
// leaves the mount point to the daemon (/workspace for the first volume).
func parseVolumeSpec(s string) (api.VolumeMount, error) {
	const want = "want NAME[:PATH[:ro]]"
	parts := strings.Split(s, ":")
	if len(parts) > 3 {
		return api.VolumeMount{}, fmt.Errorf("invalid volume %q: %s", s, want)
	}
	m := api.VolumeMount{Name: parts[0]}
	if m.Name == "" || strings.ContainsAny(m.Name, "/ \t\n") {
		return api.VolumeMount{}, fmt.Errorf("invalid volume %q: NAME must be a volume name (%s)", s, want)
	}
	if len(parts) > 1 {
		m.Path = parts[1]
		if m.Path != "" && !strings.HasPrefix(m.Path, "/") {
			return api.VolumeMount{}, fmt.Errorf("invalid volume %q: PATH must be absolute, like /data (%s)", s, want)
		}
	}
	if len(parts) > 2 {
		switch parts[2] {
		case "ro":
			m.ReadOnly = true
		case "rw":
		default:
			return api.VolumeMount{}, fmt.Errorf("invalid volume %q: the mode must be ro or rw (%s)", s, want)
		}
	}
	return m, nil
}

// parseVolumeSpecs parses every --volume value; a name given twice is an
// error.
func parseVolumeSpecs(specs []string) ([]api.VolumeMount, error) {
	var out []api.VolumeMount
	seen := map[string]bool{}
	for _, s := range specs {
		m, err := parseVolumeSpec(s)
		if err != nil {
			return nil, err
		}
		if seen[m.Name] {
			return nil, fmt.Errorf("volume %q is given twice", m.Name)
		}
		seen[m.Name] = true
		out = append(out, m)
	}
	return out, nil
}

// enumValue is a pflag.Value accepting one of a fixed set of words.
type enumValue struct {
	value   string
	allowed []string
}

func newEnum(allowed ...string) *enumValue { return &enumValue{allowed: allowed} }

func (e *enumValue) Set(v string) error {
	for _, a := range e.allowed {
		if v == a {
			e.value = v
			return nil
		}
	}
	return fmt.Errorf("want %s", orList(e.allowed))
}
func (e *enumValue) Type() string   { return strings.Join(e.allowed, "|") }
func (e *enumValue) String() string { return e.value }

// orList joins words as "a, b or c".
func orList(words []string) string {
	if len(words) <= 1 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// cpuThresholdValue is the --idle-cpu-threshold flag: cores, any finite
// number (negative means CPU use is ignored).
type cpuThresholdValue float64

func (c *cpuThresholdValue) Set(s string) error {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("want a number of cores like 0.05, or -1 to ignore CPU use")
	}
	*c = cpuThresholdValue(v)
	return nil
}
func (c *cpuThresholdValue) Type() string { return "cores" }
func (c *cpuThresholdValue) String() string {
	if *c == 0 {
		return ""
	}
	return strconv.FormatFloat(float64(*c), 'f', -1, 64)
}

// persistFlags are create's flags for persistent state and lifecycle
// policy; run, being ephemeral, has none of them.
type persistFlags struct {
	persistent   bool
	persistRoot  bool
	volumeSize   sizeValue
	volumeInodes int64
	volumes      []string
	keepVolume   bool

	idleTimeout durationValue
	onIdle      *enumValue
	maxAge      durationValue
	onMaxAge    *enumValue
	retention   durationValue
	autoResume  bool
	idleCPU     cpuThresholdValue
}

func (p *persistFlags) register(fs *pflag.FlagSet) {
	p.onIdle = newEnum("pause", "stop")
	p.onMaxAge = newEnum("stop", "delete")
	fs.BoolVar(&p.persistent, "persistent", false, "give the sandbox a workspace volume (at /workspace) that survives pause, stop/start and daemon restarts")
	fs.BoolVar(&p.persistRoot, "persist-root", false, "also keep the whole writable root layer (apt/pip installs survive stop/start); implies --persistent")
	fs.Var(&p.volumeSize, "volume-size", "quota of the workspace volume (e.g. 512m, 10g; default 1GiB); implies --persistent")
	fs.Int64Var(&p.volumeInodes, "volume-inodes", 0, "limit on the files of the workspace volume (default 1 per 16KiB); implies --persistent")
	fs.StringArrayVar(&p.volumes, "volume", nil, "attach an existing volume `NAME[:PATH[:ro]]` (see 'berth volume'); repeatable")
	fs.BoolVar(&p.keepVolume, "keep-volume", false, "keep the workspace volume when the sandbox is deleted; implies --persistent")
	fs.Var(&p.idleTimeout, "idle-timeout", "act (see --on-idle) after this long without activity (e.g. 10m)")
	fs.Var(p.onIdle, "on-idle", "what to do when idle: pause (default) or stop")
	fs.Var(&p.maxAge, "max-age", "act (see --on-max-age) when the sandbox is this old (e.g. 24h)")
	fs.Var(p.onMaxAge, "on-max-age", "what to do at --max-age: stop or delete (default)")
	fs.Var(&p.retention, "retention", "delete the sandbox this long after it was stopped (e.g. 168h)")
	fs.BoolVar(&p.autoResume, "auto-resume", false, "resume or start the sandbox when an exec, file or port request reaches it paused or stopped")
	fs.Var(&p.idleCPU, "idle-cpu-threshold", "CPU use in cores above which processes count as activity (default 0.05; negative: ignore CPU)")
}

// apply sets the persistence and policy fields of req. persistentSet says
// whether --persistent was given explicitly.
func (p *persistFlags) apply(req *api.CreateSandboxRequest, persistentSet bool) error {
	var implied []string
	if p.persistRoot {
		implied = append(implied, "--persist-root")
	}
	if p.volumeSize > 0 {
		implied = append(implied, "--volume-size")
	}
	if p.volumeInodes != 0 {
		implied = append(implied, "--volume-inodes")
	}
	if p.keepVolume {
		implied = append(implied, "--keep-volume")
	}
	if p.volumeInodes < 0 {
		return fmt.Errorf("--volume-inodes must not be negative")
	}
	if len(implied) > 0 {
		if persistentSet && !p.persistent {
			return fmt.Errorf("%s needs a persistent sandbox: drop --persistent=false", implied[0])
		}
		p.persistent = true
	}
	vols, err := parseVolumeSpecs(p.volumes)
	if err != nil {
		return err
	}
	req.Persistent = p.persistent
	req.PersistRoot = p.persistRoot
	req.VolumeSizeBytes = int64(p.volumeSize)
	req.VolumeInodes = p.volumeInodes
	req.Volumes = vols
	req.KeepVolume = p.keepVolume
	req.Policy = api.Policy{
		IdleTimeoutSeconds: p.idleTimeout.seconds(),
		OnIdle:             p.onIdle.value,
		MaxAgeSeconds:      p.maxAge.seconds(),
		OnMaxAge:           p.onMaxAge.value,
		RetentionSeconds:   p.retention.seconds(),
		AutoResume:         p.autoResume,
		IdleCPUThreshold:   float64(p.idleCPU),
	}
	return nil
}

// formatDuration prints a duration compactly: 10m rather than 10m0s, and
// whole days as such (7d).
func formatDuration(d time.Duration) string {
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func secondsDuration(secs float64) time.Duration {
	return time.Duration(secs * float64(time.Second))
}
