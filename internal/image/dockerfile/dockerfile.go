// Package dockerfile turns a Dockerfile into berth's build plan: the
// stages, each with its base (a template, an image reference or an
// earlier stage) and its steps (RUN, COPY, ADD, and the config
// instructions), with build arguments and environment variables expanded
// as docker does. It parses with moby/buildkit's own parser and
// instructions package, so what it accepts is what docker accepts;
// instructions berth does not carry out are refused with their line.
// Convert is pure: it reads no file and runs nothing.
package dockerfile

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// Limits of a Dockerfile.
const (
	MaxSize   = 1 << 20 // bytes
	MaxStages = 32
	MaxSteps  = 256 // instructions in all stages
)

// Plan is what a Dockerfile builds: its stages in order; the last is the
// result (or Target's).
type Plan struct {
	Stages []*Stage
	// Target is the index of the stage built (the last, unless asked).
	Target int
}

// Stage is one FROM and its steps.
type Stage struct {
	Name string // the AS name, lower case; "" if none
	Line int
	// Exactly one of: BaseStage >= 0 (an earlier stage), Base (a template
	// name or an image reference), or Scratch.
	BaseStage int
	Base      string
	Scratch   bool
	Steps     []*Step
}

// Step kinds.
const (
	KindRun        = "run"
	KindCopy       = "copy"
	KindEnv        = "env"
	KindWorkdir    = "workdir"
	KindUser       = "user"
	KindExpose     = "expose"
	KindCmd        = "cmd"
	KindEntrypoint = "entrypoint"
	KindLabel      = "label"
	KindStopSignal = "stopsignal"
	KindArg        = "arg"
	KindShell      = "shell"
)

// Step is one instruction of a stage, expanded.
type Step struct {
	Kind string `json:"kind"`
	Line int    `json:"-"`
	// Text is the instruction as written (for messages), its first line.
	Text string `json:"-"`

	// Run is a RUN's argv (the shell form already behind the SHELL) and
	// RunEnv the build arguments it sees as environment (sorted K=V).
	Run    []string `json:"run,omitempty"`
	RunEnv []string `json:"run_env,omitempty"`
	Copy   *Copy    `json:"copy,omitempty"`
	// Env holds ENV's and LABEL's pairs in order ([K, V]).
	Env     [][2]string `json:"env,omitempty"`
	Workdir string      `json:"workdir,omitempty"` // absolute
	User    string      `json:"user,omitempty"`
	Ports   []string    `json:"ports,omitempty"` // "8080/tcp"
	// Cmd is CMD's or ENTRYPOINT's command (the shell form behind the
	// SHELL); for SHELL the new shell.
	Cmd    []string `json:"cmd,omitempty"`
	Signal string   `json:"signal,omitempty"`
}

// Copy is a COPY or ADD: sources from the build context, or from an
// earlier stage's root, to Dst.
type Copy struct {
	Add  bool     `json:"add,omitempty"`
	Srcs []string `json:"srcs"` // clean, relative (to the context or the stage's root); may hold wildcards
	// Dst is absolute; a trailing "/" (or several sources) means a
	// directory.
	Dst       string `json:"dst"`
	DstIsDir  bool   `json:"dst_is_dir,omitempty"`
	FromStage int    `json:"from_stage"` // -1: the context
	Chown     string `json:"chown,omitempty"`
	Chmod     string `json:"chmod,omitempty"`
}

// Error is a problem of the Dockerfile, at a line (0: not at one).
type Error struct {
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return e.Msg
}

func errAt(line int, format string, args ...any) *Error {
	return &Error{Line: line, Msg: fmt.Sprintf(format, args...)}
}

// env is an ordered variable set for the lexer.
type env struct {
	keys []string
	vals map[string]string
}

func newEnv() *env { return &env{vals: map[string]string{}} }

func (e *env) Get(k string) (string, bool) { v, ok := e.vals[k]; return v, ok }
func (e *env) Keys() []string              { return slices.Clone(e.keys) }
func (e *env) set(k, v string) {
	if _, ok := e.vals[k]; !ok {
		e.keys = append(e.keys, k)
	}
	e.vals[k] = v
}
func (e *env) clone() *env {
	c := newEnv()
	for _, k := range e.keys {
		c.set(k, e.vals[k])
	}
	return c
}

// Options are a conversion's inputs besides the Dockerfile.
type Options struct {
	// BuildArgs are --build-arg values; only ARGs the file declares take
	// them.
	BuildArgs map[string]string
	// Target names the stage to build ("" : the last).
	Target string
	// BaseEnv returns the environment of a base (template or image) for
	// expansion; nil: none known.
	BaseEnv func(base string) []string
	// BaseWorkdir returns the working directory of a base, which relative
	// WORKDIR and COPY/ADD destinations start from, as docker's do ("" or
	// nil: /).
	BaseWorkdir func(base string) string
}

// Convert parses a Dockerfile and returns its plan.
func Convert(src []byte, opt Options) (plan *Plan, err error) {
	if len(src) > MaxSize {
		return nil, &Error{Msg: fmt.Sprintf("the Dockerfile is over %d bytes", MaxSize)}
	}
	defer func() {
		// The parser's own errors carry their location; keep the line.
		if err == nil {
			return
		}
		var de *Error
		if errors.As(err, &de) {
			return
		}
		line, msg := 0, err.Error()
		var le *parser.LocationError
		if errors.As(err, &le) && len(le.Locations) > 0 && len(le.Locations[0]) > 0 {
			line = le.Locations[0][0].Start.Line
			if u := le.Unwrap(); u != nil {
				msg = u.Error()
			}
		}
		var ue *instructions.UnknownInstructionError
		if errors.As(err, &ue) {
			line, msg = ue.Line, fmt.Sprintf("%s is not an instruction berth's Dockerfile builds know", strings.ToUpper(ue.Instruction))
		}
		err = &Error{Line: line, Msg: msg}
	}()
	res, err := parser.Parse(bytes.NewReader(src))
	if err != nil {
		return nil, err
	}
	if len(res.AST.Children) > MaxSteps+MaxStages {
		return nil, &Error{Msg: fmt.Sprintf("at most %d instructions", MaxSteps+MaxStages)}
	}
	// Refuse what berth does not carry out before the instructions
	// package sees it, with the line.
	for _, n := range res.AST.Children {
		switch strings.ToLower(n.Value) {
		case "healthcheck", "onbuild", "volume", "maintainer":
			return nil, errAt(n.StartLine, "%s is not supported by berth's Dockerfile builds", strings.ToUpper(n.Value))
		}
		if len(n.Heredocs) > 0 {
			return nil, errAt(n.StartLine, "heredocs (<<EOF) are not supported by berth's Dockerfile builds")
		}
	}
	stages, metaArgs, err := instructions.Parse(res.AST, linter.New(&linter.Config{SkipAll: true}))
	if err != nil {
		return nil, err
	}
	if len(stages) == 0 {
		return nil, &Error{Msg: "no FROM: a Dockerfile starts with FROM (after ARGs)"}
	}
	if len(stages) > MaxStages {
		return nil, &Error{Msg: fmt.Sprintf("at most %d stages", MaxStages)}
	}
	lex := shell.NewLex(res.EscapeToken)
	// Global ARGs: for FROM lines, and as defaults of a stage's ARG
	// redeclaring them.
	global := newEnv()
	used := map[string]bool{}
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			v, ok := argValue(kv, opt.BuildArgs, lex, global)
			if ok {
				global.set(kv.Key, v)
			} else {
				global.set(kv.Key, "")
			}
			used[kv.Key] = true
		}
	}
	plan = &Plan{Target: len(stages) - 1}
	names := map[string]int{}
	steps := 0
	for si, st := range stages {
		line := lineOf(st.Location)
		base, err := lex.ProcessWordWithMatches(st.BaseName, global)
		if err != nil {
			return nil, errAt(line, "FROM %s: %v", st.BaseName, err)
		}
		if st.Platform != "" {
			return nil, errAt(line, "FROM --platform is not supported: berth builds for this host")
		}
		s := &Stage{Name: strings.ToLower(st.Name), Line: line, BaseStage: -1}
		b := base.Result
		if idx, ok := names[strings.ToLower(b)]; ok {
			s.BaseStage = idx
		} else if strings.EqualFold(b, "scratch") {
			s.Scratch = true
		} else if b == "" {
			return nil, errAt(line, "FROM names no base")
		} else {
			s.Base = b
		}
		if s.Name != "" {
			if _, dup := names[s.Name]; dup {
				return nil, errAt(line, "stage name %q is used twice", s.Name)
			}
			names[s.Name] = si
		}
		if opt.Target != "" && strings.EqualFold(opt.Target, s.Name) {
			plan.Target = si
		}
		// The stage's variables: the base's environment, then its ARGs
		// and ENVs as they come.
		vars := newEnv()
		workdir, shellCmd := "/", []string{"/bin/sh", "-c"}
		if s.BaseStage >= 0 {
			prev := plan.Stages[s.BaseStage]
			for _, step := range prev.Steps {
				switch step.Kind {
				case KindEnv:
					for _, kv := range step.Env {
						vars.set(kv[0], kv[1])
					}
				case KindWorkdir:
					workdir = step.Workdir
				case KindShell:
					shellCmd = step.Cmd
				}
			}
		} else if s.Base != "" {
			if opt.BaseEnv != nil {
				for _, kv := range opt.BaseEnv(s.Base) {
					if k, v, ok := strings.Cut(kv, "="); ok {
						vars.set(k, v)
					}
				}
			}
			if opt.BaseWorkdir != nil {
				if wd := opt.BaseWorkdir(s.Base); path.IsAbs(wd) {
					workdir = path.Clean(wd)
				}
			}
		}
		args := newEnv() // this stage's ARGs, seen by RUN as environment
		for _, c := range st.Commands {
			steps++
			if steps > MaxSteps {
				return nil, &Error{Msg: fmt.Sprintf("at most %d instructions", MaxSteps)}
			}
			cl := lineOf(c.Location())
			// Expansion sees ARGs, overridden by ENVs.
			scope := args.clone()
			for _, k := range vars.keys {
				scope.set(k, vars.vals[k])
			}
			expand := func(word string) (string, error) {
				r, err := lex.ProcessWordWithMatches(word, scope)
				return r.Result, err
			}
			step := &Step{Line: cl, Text: firstLine(c)}
			switch c := c.(type) {
			case *instructions.RunCommand:
				if len(c.FlagsUsed) > 0 {
					return nil, errAt(cl, "RUN --%s is not supported by berth's Dockerfile builds", c.FlagsUsed[0])
				}
				step.Kind = KindRun
				step.Run = shellForm(c.ShellDependantCmdLine, shellCmd)
				for _, k := range args.keys {
					if _, shadowed := vars.vals[k]; !shadowed {
						step.RunEnv = append(step.RunEnv, k+"="+args.vals[k])
					}
				}
				slices.Sort(step.RunEnv)
			case *instructions.CopyCommand:
				if err := c.Expand(expand); err != nil {
					return nil, errAt(cl, "%v", err)
				}
				if c.Parents || len(c.ExcludePatterns) > 0 {
					return nil, errAt(cl, "COPY --parents and --exclude are not supported by berth's Dockerfile builds")
				}
				cp, err := copyOf(cl, c.SourcesAndDest, workdir, c.Chown, c.Chmod, false)
				if err != nil {
					return nil, err
				}
				if c.From != "" {
					idx, ok := names[strings.ToLower(c.From)]
					if !ok {
						if n, err := strconv.Atoi(c.From); err == nil && n >= 0 && n < si {
							idx, ok = n, true
						}
					}
					if !ok {
						return nil, errAt(cl, "COPY --from=%s: no earlier stage of that name (copying from an image is not supported: add a stage FROM it)", c.From)
					}
					cp.FromStage = idx
				}
				step.Kind, step.Copy = KindCopy, cp
			case *instructions.AddCommand:
				if err := c.Expand(expand); err != nil {
					return nil, errAt(cl, "%v", err)
				}
				if c.Checksum != "" || c.KeepGitDir != nil || c.Unpack != nil || len(c.ExcludePatterns) > 0 {
					return nil, errAt(cl, "ADD --checksum, --keep-git-dir, --unpack and --exclude are not supported by berth's Dockerfile builds")
				}
				for _, src := range c.SourcePaths {
					if strings.Contains(src, "://") || strings.HasPrefix(src, "git@") {
						return nil, errAt(cl, "ADD of a URL (%s) is not supported: fetch it in a RUN step with --network egress", src)
					}
				}
				cp, err := copyOf(cl, c.SourcesAndDest, workdir, c.Chown, c.Chmod, true)
				if err != nil {
					return nil, err
				}
				step.Kind, step.Copy = KindCopy, cp
			case *instructions.EnvCommand:
				if err := c.Expand(expand); err != nil {
					return nil, errAt(cl, "%v", err)
				}
				step.Kind = KindEnv
				for _, kv := range c.Env {
					if kv.Key == "" || strings.ContainsAny(kv.Key, "=\x00") {
						return nil, errAt(cl, "ENV: bad name %q", kv.Key)
					}
					step.Env = append(step.Env, [2]string{kv.Key, kv.Value})
					vars.set(kv.Key, kv.Value)
				}
			case *instructions.LabelCommand:
				if err := c.Expand(expand); err != nil {
					return nil, errAt(cl, "%v", err)
				}
				step.Kind = KindLabel
				for _, kv := range c.Labels {
					step.Env = append(step.Env, [2]string{kv.Key, kv.Value})
				}
			case *instructions.ArgCommand:
				step.Kind = KindArg
				for _, kv := range c.Args {
					v, ok := argValue(kv, opt.BuildArgs, lex, scope)
					if !ok {
						// A redeclared global ARG takes the global value.
						v, ok = global.Get(kv.Key)
					}
					if ok {
						args.set(kv.Key, v)
					} else {
						args.set(kv.Key, "")
					}
					used[kv.Key] = true
				}
			case *instructions.WorkdirCommand:
				if err := c.Expand(expand); err != nil {
					return nil, errAt(cl, "%v", err)
				}
				workdir = resolve(workdir, c.Path)
				step.Kind, step.Workdir = KindWorkdir, workdir
			case *instructions.UserCommand:
				if err := c.Expand(expand); err != nil {
					return nil, errAt(cl, "%v", err)
				}
				if c.User == "" || strings.ContainsAny(c.User, " \x00\n") {
					return nil, errAt(cl, "USER: bad user %q", c.User)
				}
				step.Kind, step.User = KindUser, c.User
			case *instructions.ExposeCommand:
				step.Kind = KindExpose
				for _, p := range c.Ports {
					p, err := expand(p)
					if err != nil {
						return nil, errAt(cl, "%v", err)
					}
					port, err := exposedPort(p)
					if err != nil {
						return nil, errAt(cl, "EXPOSE %s: %v", p, err)
					}
					step.Ports = append(step.Ports, port)
				}
			case *instructions.CmdCommand:
				step.Kind, step.Cmd = KindCmd, shellForm(c.ShellDependantCmdLine, shellCmd)
			case *instructions.EntrypointCommand:
				step.Kind, step.Cmd = KindEntrypoint, shellForm(c.ShellDependantCmdLine, shellCmd)
			case *instructions.StopSignalCommand:
				if err := c.Expand(expand); err != nil {
					return nil, errAt(cl, "%v", err)
				}
				step.Kind, step.Signal = KindStopSignal, c.Signal
			case *instructions.ShellCommand:
				if len(c.Shell) == 0 {
					return nil, errAt(cl, "SHELL needs a command in JSON form")
				}
				shellCmd = slices.Clone(c.Shell)
				step.Kind, step.Cmd = KindShell, shellCmd
			default:
				return nil, errAt(cl, "%s is not supported by berth's Dockerfile builds", strings.ToUpper(c.Name()))
			}
			s.Steps = append(s.Steps, step)
		}
		plan.Stages = append(plan.Stages, s)
	}
	if opt.Target != "" && !strings.EqualFold(plan.Stages[plan.Target].Name, opt.Target) {
		return nil, &Error{Msg: fmt.Sprintf("target stage %q is not in the Dockerfile", opt.Target)}
	}
	for k := range opt.BuildArgs {
		if !used[k] {
			return nil, &Error{Msg: fmt.Sprintf("build argument %s is not declared by an ARG in the Dockerfile", k)}
		}
	}
	return plan, nil
}

// Needed reports which stages the target needs (itself and the stages it
// builds on or copies from), by index.
func (p *Plan) Needed() []bool {
	need := make([]bool, len(p.Stages))
	var mark func(i int)
	mark = func(i int) {
		if need[i] {
			return
		}
		need[i] = true
		s := p.Stages[i]
		if s.BaseStage >= 0 {
			mark(s.BaseStage)
		}
		for _, st := range s.Steps {
			if st.Copy != nil && st.Copy.FromStage >= 0 {
				mark(st.Copy.FromStage)
			}
		}
	}
	mark(p.Target)
	return need
}

func argValue(kv instructions.KeyValuePairOptional, buildArgs map[string]string, lex *shell.Lex, scope shell.EnvGetter) (string, bool) {
	if v, ok := buildArgs[kv.Key]; ok {
		return v, true
	}
	if kv.Value != nil {
		r, err := lex.ProcessWordWithMatches(*kv.Value, scope)
		if err == nil {
			return r.Result, true
		}
		return *kv.Value, true
	}
	return "", false
}

func lineOf(loc []parser.Range) int {
	if len(loc) == 0 {
		return 0
	}
	return loc[0].Start.Line
}

func firstLine(c instructions.Command) string {
	type sourcer interface{ String() string }
	s := ""
	if x, ok := c.(sourcer); ok {
		s = x.String()
	}
	if s == "" {
		s = strings.ToUpper(c.Name())
	}
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// shellForm is a command line as argv: the exec (JSON) form as it is, the
// shell form behind the stage's SHELL.
func shellForm(c instructions.ShellDependantCmdLine, sh []string) []string {
	if !c.PrependShell {
		return slices.Clone(c.CmdLine)
	}
	return append(slices.Clone(sh), strings.Join(c.CmdLine, " "))
}

// resolve is WORKDIR's rule: a relative path is under the current one.
func resolve(cur, p string) string {
	if !path.IsAbs(p) {
		p = path.Join(cur, p)
	}
	return path.Clean(p)
}

func copyOf(line int, sd instructions.SourcesAndDest, workdir, chown, chmod string, add bool) (*Copy, error) {
	if len(sd.SourceContents) > 0 {
		return nil, errAt(line, "heredocs are not supported by berth's Dockerfile builds")
	}
	if len(sd.SourcePaths) == 0 {
		return nil, errAt(line, "no source")
	}
	dst := sd.DestPath
	dirDst := strings.HasSuffix(dst, "/") || strings.HasSuffix(dst, "/.") || dst == "." || len(sd.SourcePaths) > 1
	dst = resolve(workdir, dst)
	if strings.ContainsRune(dst, 0) {
		return nil, errAt(line, "bad destination")
	}
	cp := &Copy{Add: add, Dst: dst, DstIsDir: dirDst, FromStage: -1, Chown: chown, Chmod: chmod}
	for _, src := range sd.SourcePaths {
		name, err := SourceName(src)
		if err != nil {
			return nil, errAt(line, "%v", err)
		}
		cp.Srcs = append(cp.Srcs, name)
	}
	if chmod != "" {
		if _, err := strconv.ParseUint(chmod, 8, 32); err != nil || len(chmod) > 4 {
			return nil, errAt(line, "--chmod=%s: want an octal mode such as 0755", chmod)
		}
	}
	if chown != "" && strings.ContainsAny(chown, " \x00\n") {
		return nil, errAt(line, "--chown=%s: bad owner", chown)
	}
	return cp, nil
}

// SourceName is a COPY source as a name in the context: cleaned and
// relative; leading "/" and ".." are the context's root, as docker reads
// them (a source never leaves its context).
func SourceName(src string) (string, error) {
	if src == "" || strings.ContainsRune(src, 0) {
		return "", errors.New("empty or bad source")
	}
	name := path.Clean("/" + src) // "/../x" cleans to "/x": the root stops ".."
	name = strings.TrimPrefix(name, "/")
	if name == "" {
		name = "."
	}
	if _, err := path.Match(name, ""); err != nil {
		return "", fmt.Errorf("source %q: bad pattern", src)
	}
	return name, nil
}

func exposedPort(p string) (string, error) {
	port, proto, ok := strings.Cut(p, "/")
	if !ok {
		proto = "tcp"
	}
	proto = strings.ToLower(proto)
	if proto != "tcp" && proto != "udp" && proto != "sctp" {
		return "", fmt.Errorf("protocol %q", proto)
	}
	lo, hi, rng := strings.Cut(port, "-")
	for _, s := range []string{lo, hi} {
		if !rng && s == hi {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("port %q", s)
		}
	}
	return port + "/" + proto, nil
}
