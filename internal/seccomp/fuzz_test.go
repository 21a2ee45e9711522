package seccomp_test

import (
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/berth-sh/berth/internal/seccomp"
)

// FuzzCompileMatchesOracle builds small profiles from the fuzzer's input
// (two conditional rules on one syscall, OR'ed, plus unconditional ones)
// and checks the compiled program against a direct evaluation on the
// fuzzer's syscall, for every architecture (x86 only when the values fit
// in 32 bits: its section refuses others).
func FuzzCompileMatchesOracle(f *testing.F) {
	f.Add(uint8(0), uint64(3), uint64(0), uint8(6), uint64(7), uint64(0), uint8(0), uint64(3), uint64(0))
	f.Add(uint8(6), uint64(0x7e020000), uint64(0), uint8(2), uint64(1<<32), uint64(0), uint8(1), uint64(0x10000), uint64(1<<33))
	f.Add(uint8(3), uint64(1<<32|5), uint64(0), uint8(4), uint64(^uint64(0)), uint64(0), uint8(2), uint64(1<<32|5), uint64(0))
	ops := []specs.LinuxSeccompOperator{specs.OpEqualTo, specs.OpNotEqual, specs.OpLessThan, specs.OpLessEqual,
		specs.OpGreaterThan, specs.OpGreaterEqual, specs.OpMaskedEqual}
	f.Fuzz(func(t *testing.T, op1 uint8, v1, w1 uint64, op2 uint8, v2, w2 uint64, sel uint8, a0, a1 uint64) {
		p := &specs.LinuxSeccomp{
			DefaultAction: specs.ActErrno,
			Architectures: []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32},
			Syscalls: []specs.LinuxSyscall{
				{Names: []string{"read", "write", "close"}, Action: specs.ActAllow},
				{Names: []string{"ioctl"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{
					{Index: 0, Op: ops[int(op1)%len(ops)], Value: v1, ValueTwo: w1}}},
				{Names: []string{"ioctl"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{
					{Index: 0, Op: ops[int(op2)%len(ops)], Value: v2, ValueTwo: w2},
					{Index: 1, Op: specs.OpNotEqual, Value: v1}}},
				{Names: []string{"fcntl"}, Action: specs.ActTrap},
			},
		}
		if (v1|w1|v2|w2)>>32 != 0 {
			// 32-bit sections refuse 64-bit rule values.
			p.Architectures = []specs.Arch{specs.ArchX86_64, specs.ArchX32}
		}
		flt, err := seccomp.Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		names := []string{"read", "ioctl", "fcntl", "openat", "close"}
		name := names[int(sel)%len(names)]
		archs := map[specs.Arch]*arch.Info{specs.ArchX86_64: arch.X86_64, specs.ArchX86: arch.I386, specs.ArchX32: arch.X32}
		for a, info := range archs {
			nr, ok := info.SyscallNames[name]
			if !ok {
				continue
			}
			args := [6]uint64{a0, a1}
			want := oracle(p, a, nr, args)
			got := run(t, flt, data{arch: uint32(info.ID), nr: uint32(nr) | uint32(info.SeccompMask), args: args})
			if got != want {
				t.Fatalf("%s %s %x: filter %#x, profile %#x", a, name, args[:2], got, want)
			}
		}
	})
}
