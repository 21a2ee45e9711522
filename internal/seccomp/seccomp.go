// Package seccomp compiles an OCI seccomp profile into the classic BPF
// program the kernel runs, once, so that a sandbox's init (berth's agent)
// can install it as its first act instead of runc compiling the same
// profile with libseccomp on every container start.
//
// Why: with Docker's default profile (three architectures, ~400 syscalls
// and their argument rules) libseccomp's compilation is about 40% of a
// `runc run` on this class of host (20 of 52 ms measured). The program
// is a pure function of the profile, so berth compiles it when the
// profile is first seen and hands the bytes to every sandbox.
//
// The compiler implements exactly the subset of the OCI format that
// berth's profiles use and refuses everything else with an error wrapping
// ErrUnsupported, so a profile it cannot express faithfully is never
// loaded in a weakened form: the sandbox then fails to start (closed).
// Semantics follow runc 1.1 + libseccomp 2.5:
//   - each listed architecture gets its own section, selected by
//     seccomp_data.arch; a syscall from an architecture the profile does
//     not list kills the process;
//   - the x32 ABI is refused outright with ENOSYS when the profile lists
//     it (stricter than libseccomp, which would apply the rules: the
//     kernel offers x32 only with CONFIG_X86_X32_ABI and syscall.x32,
//     off in Debian's and this host's kernel, and no syscall table for it
//     is available here that is not also polluted with 64-bit-only rows);
//   - rules for one syscall with the same action are OR'ed; the
//     arguments of one rule are AND'ed; a syscall given two different
//     actions, or two conditions on one argument in one rule, is refused;
//   - syscall names unknown to an architecture's table are skipped, as
//     runc skips names unknown to libseccomp; rules whose action is the
//     default action are dropped, as runc drops them;
//   - a syscall number above the highest one the profile names for an
//     architecture returns ENOSYS instead of the default action, as
//     runc's stub does, so that programs probing newer syscalls fall
//     back instead of failing;
//   - arguments are compared as 64-bit values on 64-bit architectures
//     and on their low 32 bits on 32-bit ones (what the syscall itself
//     uses there, and what libseccomp does); a 32-bit section refuses
//     rule values that do not fit in 32 bits;
//   - SCMP_CMP_MASKED_EQ is (arg & mask) == (datum & mask).
//
// The syscall tables are those of github.com/elastic/go-seccomp-bpf
// (Linux 6.15), newer than libseccomp 2.5.4's: syscalls Docker's profile
// allows that libseccomp 2.5.4 does not know (statmount, listmount, mseal,
// the *xattrat family) are allowed here, as the profile intends, where
// runc on this host would answer ENOSYS.
package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"sort"
	"unsafe"

	"github.com/elastic/go-seccomp-bpf/arch"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// ErrUnsupported is wrapped by Compile's errors for profiles that use a
// feature this compiler does not implement.
var ErrUnsupported = errors.New("seccomp: profile feature not supported by berth's compiler")

// maxInstructions is the kernel's BPF_MAXINSNS.
const maxInstructions = 4096

// Offsets into struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
)

// x32Bit marks a syscall number of the x32 ABI (__X32_SYSCALL_BIT).
const x32Bit = 0x40000000

// actionBadArch is returned for syscalls of architectures the profile does
// not list (libseccomp's default "bad arch" action kills, too).
const actionBadArch = unix.SECCOMP_RET_KILL_PROCESS

// Filter is a compiled seccomp program.
type Filter struct {
	raw []bpf.RawInstruction
}

// Len is the number of BPF instructions.
func (f *Filter) Len() int { return len(f.raw) }

// Instructions returns the program, for inspection and tests.
func (f *Filter) Instructions() []bpf.RawInstruction { return f.raw }

// MarshalBinary encodes the program as the kernel's array of struct
// sock_filter in host byte order.
func (f *Filter) MarshalBinary() ([]byte, error) {
	out := make([]byte, 0, 8*len(f.raw))
	for _, ins := range f.raw {
		out = binary.NativeEndian.AppendUint16(out, ins.Op)
		out = append(out, ins.Jt, ins.Jf)
		out = binary.NativeEndian.AppendUint32(out, ins.K)
	}
	return out, nil
}

// Parse decodes MarshalBinary's encoding. It checks the shape (length, a
// final return, forward jumps in range) so that a truncated or corrupt
// program is refused here rather than half-loaded.
func Parse(b []byte) (*Filter, error) {
	if len(b) == 0 || len(b)%8 != 0 {
		return nil, fmt.Errorf("seccomp: program of %d bytes is not a whole number of instructions", len(b))
	}
	n := len(b) / 8
	if n > maxInstructions {
		return nil, fmt.Errorf("seccomp: program of %d instructions exceeds the kernel's %d", n, maxInstructions)
	}
	raw := make([]bpf.RawInstruction, n)
	for i := range raw {
		c := b[8*i : 8*i+8]
		raw[i] = bpf.RawInstruction{Op: binary.NativeEndian.Uint16(c), Jt: c[2], Jf: c[3], K: binary.NativeEndian.Uint32(c[4:])}
	}
	insts, ok := bpf.Disassemble(raw)
	if !ok {
		return nil, errors.New("seccomp: program holds instructions that are not classic BPF")
	}
	if _, err := bpf.NewVM(insts); err != nil {
		return nil, fmt.Errorf("seccomp: invalid program: %w", err)
	}
	return &Filter{raw: raw}, nil
}

// ReadFile reads a program in MarshalBinary's encoding from f with pread
// (f's offset may be shared with other processes), refusing sizes no
// program can have before allocating, and parses it.
func ReadFile(f *os.File) (*Filter, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() <= 0 || st.Size() > 8*maxInstructions {
		return nil, fmt.Errorf("seccomp: program of %d bytes", st.Size())
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, err
	}
	return Parse(b)
}

// Install loads the filter into the calling process, synchronised across
// all its threads (SECCOMP_FILTER_FLAG_TSYNC), after setting no_new_privs.
// Every child the process starts afterwards inherits it.
func (f *Filter) Install() error {
	if len(f.raw) == 0 {
		return errors.New("seccomp: empty program")
	}
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: no_new_privs: %w", err)
	}
	filter := make([]unix.SockFilter, len(f.raw))
	for i, ins := range f.raw {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	goruntime.KeepAlive(filter)
	if errno != 0 {
		return fmt.Errorf("seccomp: loading filter: %w", errno)
	}
	if r != 0 {
		return fmt.Errorf("seccomp: thread %d could not be synchronised", r)
	}
	return nil
}

// archSection is the part of the program for one architecture.
type archSection struct {
	name specs.Arch
	info *arch.Info
}

// archInfos maps the OCI architectures this compiler knows to the syscall
// tables of github.com/elastic/go-seccomp-bpf.
var archInfos = map[specs.Arch]*arch.Info{
	specs.ArchX86_64:  arch.X86_64,
	specs.ArchX86:     arch.I386,
	specs.ArchAARCH64: arch.AARCH64,
	specs.ArchARM:     arch.ARM,
}

// nativeArch is the OCI name of the architecture this binary runs on.
func nativeArch() (specs.Arch, error) {
	switch goruntime.GOARCH {
	case "amd64":
		return specs.ArchX86_64, nil
	case "arm64":
		return specs.ArchAARCH64, nil
	}
	return "", fmt.Errorf("%w: architecture %s", ErrUnsupported, goruntime.GOARCH)
}

// cond is one argument check of a rule.
type cond struct {
	arg        uint32
	op         specs.LinuxSeccompOperator
	value, two uint64
}

// rule is what the profile says about one syscall number.
type rule struct {
	nr            uint32
	action        uint32
	unconditional bool
	sets          [][]cond // OR of ANDs
}

// Compile translates profile into a BPF program. See the package comment
// for the semantics and for what it refuses.
func Compile(s *specs.LinuxSeccomp) (*Filter, error) {
	if s == nil {
		return nil, errors.New("seccomp: no profile")
	}
	if s.ListenerPath != "" || len(s.ListenerMetadata) > 0 {
		return nil, fmt.Errorf("%w: seccomp notify listener", ErrUnsupported)
	}
	if len(s.Flags) > 0 {
		return nil, fmt.Errorf("%w: flags %v", ErrUnsupported, s.Flags)
	}
	def, err := action(s.DefaultAction, s.DefaultErrnoRet)
	if err != nil {
		return nil, fmt.Errorf("default action: %w", err)
	}
	native, err := nativeArch()
	if err != nil {
		return nil, err
	}
	archs := s.Architectures
	if len(archs) == 0 {
		archs = []specs.Arch{native}
	}
	var sections []archSection
	seen := map[specs.Arch]bool{}
	for _, a := range archs {
		if a == specs.ArchX32 {
			continue // refused as a whole in link
		}
		info, ok := archInfos[a]
		if !ok {
			return nil, fmt.Errorf("%w: architecture %s", ErrUnsupported, a)
		}
		if seen[a] {
			continue
		}
		seen[a] = true
		sections = append(sections, archSection{name: a, info: info})
	}
	if !seen[native] {
		return nil, fmt.Errorf("%w: profile does not list the native architecture %s", ErrUnsupported, native)
	}
	x32 := false
	for _, a := range archs {
		x32 = x32 || a == specs.ArchX32
	}
	if x32 && native != specs.ArchX86_64 {
		return nil, fmt.Errorf("%w: x32 on %s", ErrUnsupported, native)
	}

	progs := map[specs.Arch][]bpf.Instruction{}
	for _, sec := range sections {
		rules, last, err := collect(s, sec.info, def)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sec.name, err)
		}
		insts, err := assemble(rules, last, def, wide(sec.name))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sec.name, err)
		}
		progs[sec.name] = insts
	}
	insts, err := link(sections, progs, x32)
	if err != nil {
		return nil, err
	}
	if len(insts) > maxInstructions {
		return nil, fmt.Errorf("seccomp: program of %d instructions exceeds the kernel's %d", len(insts), maxInstructions)
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("seccomp: assembling: %w", err)
	}
	return &Filter{raw: raw}, nil
}

// action encodes an OCI action as a seccomp return value.
func action(a specs.LinuxSeccompAction, errnoRet *uint) (uint32, error) {
	errno := uint32(unix.EPERM) // runc's default for ERRNO
	if errnoRet != nil {
		if *errnoRet == 0 || *errnoRet > 0xfff {
			return 0, fmt.Errorf("%w: errno %d", ErrUnsupported, *errnoRet)
		}
		errno = uint32(*errnoRet)
	}
	switch a {
	case specs.ActAllow:
		return unix.SECCOMP_RET_ALLOW, nil
	case specs.ActErrno:
		return unix.SECCOMP_RET_ERRNO | errno, nil
	case specs.ActKill, specs.ActKillThread:
		return unix.SECCOMP_RET_KILL_THREAD, nil
	case specs.ActKillProcess:
		return unix.SECCOMP_RET_KILL_PROCESS, nil
	case specs.ActTrap:
		return unix.SECCOMP_RET_TRAP, nil
	case specs.ActLog:
		return unix.SECCOMP_RET_LOG, nil
	}
	return 0, fmt.Errorf("%w: action %q", ErrUnsupported, a)
}

// wide reports whether arguments of architecture a are 64-bit.
func wide(a specs.Arch) bool { return a == specs.ArchX86_64 || a == specs.ArchAARCH64 }

// collect gathers, per syscall number of one architecture, what the
// profile's rules say, sorted by number, and the highest number the
// profile names for it (under any action, as runc counts).
func collect(s *specs.LinuxSeccomp, info *arch.Info, def uint32) ([]*rule, uint32, error) {
	byNr := map[uint32]*rule{}
	var last uint32
	for i, sc := range s.Syscalls {
		act, err := action(sc.Action, sc.ErrnoRet)
		if err != nil {
			return nil, 0, fmt.Errorf("syscall rule %d: %w", i, err)
		}
		for _, name := range sc.Names {
			if num, ok := info.SyscallNames[name]; ok {
				last = max(last, uint32(num))
			}
		}
		if act == def {
			continue
		}
		set, err := conditions(sc.Args)
		if err != nil {
			return nil, 0, fmt.Errorf("syscall rule %d (%v): %w", i, sc.Names, err)
		}
		for _, name := range sc.Names {
			num, ok := info.SyscallNames[name]
			if !ok {
				continue
			}
			nr := uint32(num)
			r := byNr[nr]
			if r == nil {
				r = &rule{nr: nr, action: act}
				byNr[nr] = r
			}
			if r.action != act {
				return nil, 0, fmt.Errorf("%w: syscall %s has two actions", ErrUnsupported, name)
			}
			switch {
			case r.unconditional:
			case set == nil:
				r.unconditional, r.sets = true, nil
			default:
				r.sets = append(r.sets, set)
			}
		}
	}
	out := make([]*rule, 0, len(byNr))
	for _, r := range byNr {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].nr < out[j].nr })
	return out, last, nil
}

// conditions converts one rule's argument checks (AND'ed).
func conditions(args []specs.LinuxSeccompArg) ([]cond, error) {
	if len(args) == 0 {
		return nil, nil
	}
	var out []cond
	used := map[uint]bool{}
	for _, a := range args {
		if a.Index > 5 {
			return nil, fmt.Errorf("%w: argument index %d", ErrUnsupported, a.Index)
		}
		if used[a.Index] {
			return nil, fmt.Errorf("%w: two conditions on argument %d", ErrUnsupported, a.Index)
		}
		used[a.Index] = true
		switch a.Op {
		case specs.OpEqualTo, specs.OpNotEqual, specs.OpLessThan, specs.OpLessEqual,
			specs.OpGreaterThan, specs.OpGreaterEqual, specs.OpMaskedEqual:
		default:
			return nil, fmt.Errorf("%w: operator %q", ErrUnsupported, a.Op)
		}
		out = append(out, cond{arg: uint32(a.Index), op: a.Op, value: a.Value, two: a.ValueTwo})
	}
	return out, nil
}

// asm is a tiny assembler with forward labels. Conditional jumps must
// stay within 255 instructions, which the emitters below guarantee by
// keeping every conditional target local and using ja for the rest.
type asm struct {
	insts  []bpf.Instruction
	fixups []fixup
	labels []int // label -> instruction index, -1 until placed
}

type fixup struct {
	at        int
	jt, jf    int // labels, or -1 for "next instruction"
	long      bool
	longLabel int
}

func (a *asm) label() int { a.labels = append(a.labels, -1); return len(a.labels) - 1 }

func (a *asm) place(l int) { a.labels[l] = len(a.insts) }

func (a *asm) emit(i bpf.Instruction) { a.insts = append(a.insts, i) }

// jump emits a conditional jump to labels jt and jf (-1: fall through).
func (a *asm) jump(cond bpf.JumpTest, val uint32, jt, jf int) {
	a.fixups = append(a.fixups, fixup{at: len(a.insts), jt: jt, jf: jf})
	a.emit(bpf.JumpIf{Cond: cond, Val: val})
}

// ja emits an unconditional jump to label l.
func (a *asm) ja(l int) {
	a.fixups = append(a.fixups, fixup{at: len(a.insts), long: true, longLabel: l})
	a.emit(bpf.Jump{})
}

func (a *asm) resolve() ([]bpf.Instruction, error) {
	skip := func(at, l int) (int, error) {
		if l < 0 {
			return 0, nil
		}
		to := a.labels[l]
		if to <= at {
			return 0, errors.New("seccomp: internal error: backward or unplaced label")
		}
		return to - at - 1, nil
	}
	for _, f := range a.fixups {
		if f.long {
			n, err := skip(f.at, f.longLabel)
			if err != nil {
				return nil, err
			}
			a.insts[f.at] = bpf.Jump{Skip: uint32(n)}
			continue
		}
		ji := a.insts[f.at].(bpf.JumpIf)
		t, err := skip(f.at, f.jt)
		if err != nil {
			return nil, err
		}
		e, err := skip(f.at, f.jf)
		if err != nil {
			return nil, err
		}
		if t > 255 || e > 255 {
			return nil, errors.New("seccomp: internal error: conditional jump out of range")
		}
		ji.SkipTrue, ji.SkipFalse = uint8(t), uint8(e)
		a.insts[f.at] = ji
	}
	return a.insts, nil
}

// argHi and argLo are the offsets of the halves of argument i in
// seccomp_data on this (little-endian) host.
func argLo(i uint32) uint32 { return 16 + 8*i }
func argHi(i uint32) uint32 { return 16 + 8*i + 4 }

// emitCond emits one argument check: it falls through when the check
// passes and jumps to fail when it does not. Checks are on the whole
// 64-bit value when wide, else on its low 32 bits (see the package
// comment).
func (a *asm) emitCond(c cond, fail int, wide bool) {
	hi, lo := uint32(c.value>>32), uint32(c.value)
	ld := func(off uint32) { a.emit(bpf.LoadAbsolute{Off: off, Size: 4}) }
	pass := a.label()
	if !wide {
		ld(argLo(c.arg))
		switch c.op {
		case specs.OpEqualTo:
			a.jump(bpf.JumpEqual, lo, -1, fail)
		case specs.OpNotEqual:
			a.jump(bpf.JumpEqual, lo, fail, -1)
		case specs.OpGreaterThan:
			a.jump(bpf.JumpGreaterThan, lo, -1, fail)
		case specs.OpGreaterEqual:
			a.jump(bpf.JumpGreaterOrEqual, lo, -1, fail)
		case specs.OpLessThan:
			a.jump(bpf.JumpGreaterOrEqual, lo, fail, -1)
		case specs.OpLessEqual:
			a.jump(bpf.JumpGreaterThan, lo, fail, -1)
		case specs.OpMaskedEqual:
			a.emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: lo})
			a.jump(bpf.JumpEqual, uint32(c.two)&lo, -1, fail)
		}
		a.place(pass)
		return
	}
	switch c.op {
	case specs.OpEqualTo:
		ld(argHi(c.arg))
		a.jump(bpf.JumpEqual, hi, -1, fail)
		ld(argLo(c.arg))
		a.jump(bpf.JumpEqual, lo, -1, fail)
	case specs.OpNotEqual:
		ld(argHi(c.arg))
		a.jump(bpf.JumpEqual, hi, -1, pass)
		ld(argLo(c.arg))
		a.jump(bpf.JumpEqual, lo, fail, -1)
	case specs.OpGreaterThan, specs.OpGreaterEqual:
		ld(argHi(c.arg))
		a.jump(bpf.JumpGreaterThan, hi, pass, -1)
		a.jump(bpf.JumpEqual, hi, -1, fail)
		ld(argLo(c.arg))
		if c.op == specs.OpGreaterThan {
			a.jump(bpf.JumpGreaterThan, lo, -1, fail)
		} else {
			a.jump(bpf.JumpGreaterOrEqual, lo, -1, fail)
		}
	case specs.OpLessThan, specs.OpLessEqual:
		ld(argHi(c.arg))
		a.jump(bpf.JumpGreaterOrEqual, hi, -1, pass) // hi < vhi: pass
		a.jump(bpf.JumpEqual, hi, -1, fail)          // hi > vhi: fail
		ld(argLo(c.arg))
		if c.op == specs.OpLessThan {
			a.jump(bpf.JumpGreaterOrEqual, lo, fail, -1)
		} else {
			a.jump(bpf.JumpGreaterThan, lo, fail, -1)
		}
	case specs.OpMaskedEqual:
		// (arg & mask) == (datum & mask)
		ld(argHi(c.arg))
		a.emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: hi})
		a.jump(bpf.JumpEqual, uint32(c.two>>32)&hi, -1, fail)
		ld(argLo(c.arg))
		a.emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: lo})
		a.jump(bpf.JumpEqual, uint32(c.two)&lo, -1, fail)
	}
	a.place(pass)
}

// assemble emits one architecture's rules, ending in the default action.
// The syscall number is in the accumulator on entry and again after every
// rule that did not decide (argument checks reload it).
//
// First, numbers above last (the highest the profile names) return
// ENOSYS. Then unconditional rules, in runs of up to 255 syscalls sharing
// one action, each run a chain of jeq into one return. A rule with
// argument checks is: jeq nr (else skip the block); for each OR'ed set,
// its checks then return the action; when none matched, reload the number.
func assemble(rules []*rule, last, def uint32, wide bool) ([]bpf.Instruction, error) {
	var a asm
	if !wide {
		for _, r := range rules {
			for _, set := range r.sets {
				for _, c := range set {
					if c.value>>32 != 0 || c.two>>32 != 0 {
						return nil, fmt.Errorf("%w: 64-bit value %#x in a rule for a 32-bit architecture", ErrUnsupported, c.value)
					}
				}
			}
		}
	}
	if def != unix.SECCOMP_RET_ALLOW {
		cont := a.label()
		stub := a.label()
		a.jump(bpf.JumpGreaterThan, last, stub, cont)
		a.place(stub)
		a.emit(bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)})
		a.place(cont)
	}
	var uncond, condl []*rule
	for _, r := range rules {
		if r.unconditional {
			uncond = append(uncond, r)
		} else {
			condl = append(condl, r)
		}
	}
	sort.SliceStable(uncond, func(i, j int) bool { return uncond[i].action < uncond[j].action })
	for i := 0; i < len(uncond); {
		j := i
		for j < len(uncond) && uncond[j].action == uncond[i].action && j-i < 255 {
			j++
		}
		ret := a.label()
		next := a.label()
		for k := i; k < j; k++ {
			if k == j-1 {
				a.jump(bpf.JumpEqual, uncond[k].nr, ret, next)
			} else {
				a.jump(bpf.JumpEqual, uncond[k].nr, ret, -1)
			}
		}
		a.place(ret)
		a.emit(bpf.RetConstant{Val: uncond[i].action})
		a.place(next)
		i = j
	}
	for _, r := range condl {
		end := a.label()
		body := a.label()
		a.jump(bpf.JumpEqual, r.nr, body, -1)
		a.ja(end)
		a.place(body)
		for _, set := range r.sets {
			next := a.label()
			for _, c := range set {
				a.emitCond(c, next, wide)
			}
			a.emit(bpf.RetConstant{Val: r.action})
			a.place(next)
		}
		a.place(end)
		a.emit(bpf.LoadAbsolute{Off: offNr, Size: 4})
	}
	a.emit(bpf.RetConstant{Val: def})
	return a.resolve()
}

// link lays the sections out behind a dispatch on the architecture:
//
//	ld arch; jeq A1 → sec1; jeq A2 → sec2; ...; ret KILL_PROCESS
//	sec(x86_64): ld nr; jge x32bit → ret ENOSYS (x32 listed) or KILL; <rules>
//	sec(other):  ld nr; <rules>
func link(sections []archSection, progs map[specs.Arch][]bpf.Instruction, x32 bool) ([]bpf.Instruction, error) {
	x32Action := uint32(actionBadArch)
	if x32 {
		x32Action = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	}
	var blocks [][]bpf.Instruction
	for _, s := range sections {
		b := []bpf.Instruction{bpf.LoadAbsolute{Off: offNr, Size: 4}}
		if s.name == specs.ArchX86_64 {
			// x32 shares x86_64's audit arch; its numbers carry the x32 bit.
			b = append(b, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32Bit, SkipTrue: 0, SkipFalse: 1},
				bpf.RetConstant{Val: x32Action})
		}
		blocks = append(blocks, append(b, progs[s.name]...))
	}
	// Dispatch: per section two instructions (jeq; ja), then the bad-arch return.
	out := []bpf.Instruction{bpf.LoadAbsolute{Off: offArch, Size: 4}}
	pos := 1 + 2*len(sections) + 1
	for i, s := range sections {
		out = append(out, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(s.info.ID), SkipTrue: 0, SkipFalse: 1})
		ja := len(out)
		out = append(out, bpf.Jump{Skip: uint32(pos - ja - 1)})
		pos += len(blocks[i])
	}
	out = append(out, bpf.RetConstant{Val: actionBadArch})
	for _, b := range blocks {
		out = append(out, b...)
	}
	if len(out) != pos {
		return nil, fmt.Errorf("seccomp: internal layout error (%d != %d)", len(out), pos)
	}
	return out, nil
}
