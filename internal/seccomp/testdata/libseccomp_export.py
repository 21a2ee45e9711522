"""Builds an OCI seccomp profile with the host's libseccomp (what runc
links) and exports the BPF program, for the differential test in
seccomp_test.go. Usage: libseccomp_export.py PROFILE.json OUT.bpf
Prints, as JSON, the syscall number libseccomp gives each profile name on
x86_64 and x86 (absent: libseccomp does not know it)."""
import ctypes, json, os, sys

lib = ctypes.CDLL("libseccomp.so.2")
lib.seccomp_init.restype = ctypes.c_void_p
lib.seccomp_init.argtypes = [ctypes.c_uint32]
lib.seccomp_arch_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
lib.seccomp_syscall_resolve_name_arch.argtypes = [ctypes.c_uint32, ctypes.c_char_p]
lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
lib.seccomp_release.argtypes = [ctypes.c_void_p]


class Cmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(Cmp)]
OPS = {"SCMP_CMP_NE": 1, "SCMP_CMP_LT": 2, "SCMP_CMP_LE": 3, "SCMP_CMP_EQ": 4, "SCMP_CMP_GE": 5, "SCMP_CMP_GT": 6, "SCMP_CMP_MASKED_EQ": 7}
ARCHES = {"SCMP_ARCH_X86_64": 0xC000003E, "SCMP_ARCH_X86": 0x40000003, "SCMP_ARCH_X32": 0x4000003E}
SCMP_FLTATR_CTL_NNP = 3


def action(name, errno):
    if name == "SCMP_ACT_ALLOW":
        return 0x7FFF0000
    if name == "SCMP_ACT_ERRNO":
        return 0x00050000 | (1 if errno is None else errno)
    raise SystemExit("unsupported action " + name)


def main(profile_path, out_path):
    p = json.load(open(profile_path))
    default = action(p["defaultAction"], p.get("defaultErrnoRet"))
    ctx = lib.seccomp_init(default)
    if not ctx:
        raise SystemExit("seccomp_init failed")
    lib.seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0)
    for a in p["architectures"]:
        if a != "SCMP_ARCH_X86_64":  # native, already in the context
            rc = lib.seccomp_arch_add(ctx, ARCHES[a])
            if rc != 0:
                raise SystemExit("arch %s: %d" % (a, rc))
    resolved = {"x86_64": {}, "x86": {}}
    for rule in p["syscalls"]:
        act = action(rule["action"], rule.get("errnoRet"))
        args = rule.get("args") or []
        arr = (Cmp * max(1, len(args)))(*[Cmp(x["index"], OPS[x["op"]], x.get("value", 0), x.get("valueTwo", 0)) for x in args])
        for n in rule["names"]:
            for key, tok in (("x86_64", ARCHES["SCMP_ARCH_X86_64"]), ("x86", ARCHES["SCMP_ARCH_X86"])):
                nr = lib.seccomp_syscall_resolve_name_arch(tok, n.encode())
                if nr >= 0:  # negative: a pseudo-number, not on this arch
                    resolved[key][n] = nr
            if act == default:
                continue  # as runc: a rule with the default action adds nothing
            # As runc does: resolve by name on the native arch; names of
            # other arches get libseccomp's negative pseudo-numbers, which
            # it maps onto every arch in the context. Only unknown names
            # (__NR_SCMP_ERROR, -1) are skipped.
            sysno = lib.seccomp_syscall_resolve_name(n.encode())
            if sysno == -1:
                continue
            rc = lib.seccomp_rule_add_array(ctx, act, sysno, len(args), arr)
            if rc != 0:
                print("rule %s: %d" % (n, rc), file=sys.stderr)
    fd = os.open(out_path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    if lib.seccomp_export_bpf(ctx, fd) != 0:
        raise SystemExit("export failed")
    os.close(fd)
    lib.seccomp_release(ctx)
    json.dump(resolved, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
