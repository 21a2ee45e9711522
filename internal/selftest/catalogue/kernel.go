package catalogue

import "github.com/berth-sh/berth/internal/selftest/attack"

// Kernel surface: system calls and kernel interfaces a sandbox must not
// reach. All run in one shared sandbox ("kernel"). Syscall numbers are
// x86_64 unless marked i386 (int 0x80) or x32 (0x40000000 | nr).
func kernelAttacks() []*attack.Attack {
	const g = "kernel"
	k := func(id, desc, expected string, run func(ctx ctxT, e *attack.Env) attack.Outcome, classes ...string) *attack.Attack {
		return &attack.Attack{ID: "kernel." + id, Category: attack.CatKernel, Description: desc, Expected: expected, Run: run, Classes: classes}
	}
	return []*attack.Attack{
		k("mount-tmpfs", "mount -t tmpfs none /mnt", "EPERM: no CAP_SYS_ADMIN",
			attack.Py(g, `report(sc(165, b"none", b"/mnt", b"tmpfs", 0, 0))`)),
		k("fsopen", "fsopen(\"tmpfs\") (new mount API)", "EPERM",
			attack.Py(g, `report(sc(430, b"tmpfs", 0))`)),
		k("umount-masked", "umount2(/proc/kcore, MNT_DETACH) to unmask a masked path", "EPERM",
			attack.Py(g, `report(sc(166, b"/proc/kcore", 2))`)),
		// Host seccomp (Docker's profile) refuses user namespaces and
		// keyrings on the shared-kernel classes. Under gVisor both are
		// the Sentry's own objects, served in user space, and reach no
		// host kernel state (docs/gvisor.md): runc/kata properties.
		k("unshare-user", "unshare(CLONE_NEWUSER): a new user namespace with full caps", "EPERM",
			attack.Py(g, `report(sc(272, 0x10000000))`), attack.Runc, attack.Kata),
		k("unshare-mount", "unshare(CLONE_NEWNS)", "EPERM",
			attack.Py(g, `report(sc(272, 0x00020000))`)),
		k("unshare-net", "unshare(CLONE_NEWNET)", "EPERM",
			attack.Py(g, `report(sc(272, 0x40000000))`)),
		k("unshare-cli", "unshare -U -m -n -p -f true (util-linux)", "fails",
			attack.ShFails(g, `unshare -U true || unshare -m true || unshare -n true || unshare -p -f true`), attack.Runc, attack.Kata),
		k("setns", "setns() into pid 1's network namespace", "EPERM",
			attack.Py(g, `try:
    fd = os.open("/proc/1/ns/net", os.O_RDONLY)
except OSError as ex:
    report("err " + ename(ex.errno) + " opening /proc/1/ns/net"); sys.exit()
report(sc(308, fd, 0))`)),
		k("bpf", "bpf(BPF_MAP_CREATE, hash map)", "EPERM",
			attack.Py(g, `a = ctypes.create_string_buffer(struct.pack("<IIII", 1, 4, 4, 1) + b"\0" * 56); report(sc(321, 0, a, 72))`)),
		k("perf_event_open", "perf_event_open(software cpu-clock, self)", "EPERM",
			attack.Py(g, `a = ctypes.create_string_buffer(struct.pack("<IIQ", 1, 128, 0) + b"\0" * 112); report(sc(298, a, 0, -1, -1, 0))`)),
		k("keyctl", "keyctl(KEYCTL_GET_KEYRING_ID, session keyring, create)", "EPERM",
			attack.Py(g, `report(sc(250, 0, -3, 1))`), attack.Runc, attack.Kata),
		k("add_key", "add_key(\"user\", ...) into the process keyring", "EPERM",
			attack.Py(g, `report(sc(248, b"user", b"selftest", b"x", 1, -2))`)),
		k("init_module", "init_module() of an ELF header", "EPERM",
			attack.Py(g, `b = ctypes.create_string_buffer(b"\x7fELF" + b"\0" * 60); report(sc(175, b, 64, b""))`)),
		k("finit_module", "finit_module() of /usr/bin/true", "EPERM",
			attack.Py(g, `fd = os.open("/usr/bin/true", os.O_RDONLY); report(sc(313, fd, b"", 0))`)),
		k("kexec_load", "kexec_load(0, 0, NULL, 0)", "EPERM",
			attack.Py(g, `report(sc(246, 0, 0, 0, 0))`)),
		k("userfaultfd", "userfaultfd(O_CLOEXEC|O_NONBLOCK)", "EPERM",
			attack.Py(g, `report(sc(323, 0o2004000))`)),
		k("io_uring_setup", "io_uring_setup(8 entries)", "EPERM/ENOSYS (the profile denies io_uring)",
			attack.Py(g, `p = ctypes.create_string_buffer(120); report(sc(425, 8, p))`)),
		// The ENOSYS answer exists for host seccomp's sake (clone3's flags
		// are behind a pointer it cannot read); under gVisor clone3 is
		// served by the Sentry, so it is a runc/kata property.
		k("clone3", "clone3(NULL, 0)", "ENOSYS (libc falls back to clone, whose flags seccomp can check)",
			attack.Py(g, `report(sc(435, 0, 0))`, "ENOSYS"), attack.Runc, attack.Kata),
		k("af-vsock", "socket(AF_VSOCK, SOCK_STREAM): talk to the hypervisor", "EPERM/EAFNOSUPPORT",
			attack.Py(g, `report(oserr(lambda: socket.socket(40, socket.SOCK_STREAM)))`, "EPERM", "EACCES", "EAFNOSUPPORT", "ENOSYS")),
		k("af-packet", "socket(AF_PACKET, SOCK_RAW, ETH_P_ALL)", "EPERM: no CAP_NET_RAW",
			attack.Py(g, `report(oserr(lambda: socket.socket(17, socket.SOCK_RAW, 0x0300)))`, "EPERM", "EACCES", "EAFNOSUPPORT", "ENOSYS")),
		k("raw-socket", "socket(AF_INET, SOCK_RAW, ICMP)", "EPERM: no CAP_NET_RAW",
			attack.Py(g, `report(oserr(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)))`, "EPERM", "EACCES", "EAFNOSUPPORT", "ENOSYS")),
		k("ptrace-unrelated", "PTRACE_ATTACH to a process of another uid (nobody)", "EPERM",
			attack.Py(g, `import subprocess
p = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "30"])
time.sleep(0.3)
r = sc(101, 16, p.pid, 0, 0)
if r.startswith("ok"):
    os.waitpid(p.pid, 0x40000000); sc(101, 17, p.pid, 0, 0)
p.kill(); p.wait()
report(r)`)),
		k("personality", "personality(ADDR_NO_RANDOMIZE|READ_IMPLIES_EXEC)", "EPERM (only the default and PER_LINUX32 are allowed)",
			// Linux never answers EINVAL to a valid persona: EINVAL is a
			// refusal (gVisor supports only a few personas).
			attack.Py(g, `report(sc(135, 0x0040000 | 0x0400000))`, "EPERM", "EACCES", "ENOSYS", "EINVAL")),
		k("i386-unshare", "int 0x80 unshare(CLONE_NEWUSER) from a 64-bit process", "refused (EPERM/ENOSYS or killed)",
			attack.Py(g, `report(int80(310, 0x10000000))`)),
		k("i386-keyctl", "int 0x80 keyctl(KEYCTL_GET_KEYRING_ID)", "refused (EPERM/ENOSYS or killed)",
			attack.Py(g, `report(int80(288, 0, -3, 1))`)),
		k("x32-unshare", "x32 ABI unshare(CLONE_NEWUSER) (0x40000000|272)", "ENOSYS: the x32 ABI is refused",
			attack.Py(g, `report(sc(0x40000000 | 272, 0x10000000))`)),
		k("x32-keyctl", "x32 ABI keyctl (0x40000000|250)", "ENOSYS",
			attack.Py(g, `report(sc(0x40000000 | 250, 0, -3, 1))`)),
		k("mknod-block", "mknod /tmp/sda b 8 0 (the host's disk)", "EPERM: no CAP_MKNOD",
			attack.Py(g, `report(oserr(lambda: os.mknod("/tmp/st-sda", 0o60600, os.makedev(8, 0))))`)),
		k("mknod-char", "mknod /tmp/mem c 1 1 (/dev/mem)", "EPERM",
			attack.Py(g, `report(oserr(lambda: os.mknod("/tmp/st-mem", 0o20600, os.makedev(1, 1))))`)),
		k("chroot-escape", "chroot(subdir) then chdir(..) x100 and chroot(.): the classic escape", "still at the sandbox's own root",
			attack.Py(g, `root = os.stat("/"); fd = os.open("/", os.O_RDONLY)
os.makedirs("/tmp/st-cj", exist_ok=True)
try:
    os.chroot("/tmp/st-cj")
except OSError as ex:
    report("err chroot " + ename(ex.errno)); sys.exit()
os.fchdir(fd)
for i in range(100): os.chdir("..")
os.chroot(".")
now = os.stat("/")
marks = [m for m in (os.path.join(DD, "berth.db"), HD) if m and os.path.exists(m)]
# Above the container's root gVisor has only its own empty root: moving
# there reaches nothing (no entry, no host path); any entry or host path is
# an escape.
if marks or ((now.st_dev, now.st_ino) != (root.st_dev, root.st_ino) and os.listdir("/")):
    report("ok escaped: / is now dev %d ino %d (was %d %d), entries %s, host paths seen %s" % (now.st_dev, now.st_ino, root.st_dev, root.st_ino, sorted(os.listdir("/"))[:6], marks))
elif (now.st_dev, now.st_ino) != (root.st_dev, root.st_ino):
    report("err confined: above the root is only the runtime's own empty root, nothing of the host")
else:
    report("err confined: back at the sandbox's own root")`, "*")),
		k("pivot_root", "pivot_root(/tmp/pr, /tmp/pr/old)", "EPERM",
			attack.Py(g, `os.makedirs("/tmp/st-pr/old", exist_ok=True); report(sc(155, b"/tmp/st-pr", b"/tmp/st-pr/old"))`)),
		k("open_by_handle_at", "name_to_handle_at + open_by_handle_at (the 'shocker' escape)", "EPERM: no CAP_DAC_READ_SEARCH",
			attack.Py(g, `h = ctypes.create_string_buffer(struct.pack("<Ii", 128, 0) + b"\0" * 128); mid = ctypes.c_int()
r = sc(303, -100, b"/etc", h, ctypes.byref(mid), 0)
fd = os.open("/", os.O_RDONLY)
report(sc(304, fd, h, 0))`)),
		k("sethostname", "sethostname(\"pwned\")", "EPERM",
			attack.Py(g, `report(sc(170, b"pwned", 5))`)),
		k("reboot", "reboot(LINUX_REBOOT_CMD_CAD_OFF)", "EPERM: no CAP_SYS_BOOT",
			attack.Py(g, `report(sc(169, 0xfee1dead, 672274793, 0, 0))`)),
		k("ioperm", "ioperm(0x80, 1, 1): raw I/O ports", "EPERM",
			attack.Py(g, `report(sc(173, 0x80, 1, 1))`)),
		k("syslog", "syslog(SYSLOG_ACTION_READ_ALL): the host kernel log", "EPERM, or no host kernel messages",
			attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				out, exit, err := e.Py(ctx, sb.ID, `b = ctypes.create_string_buffer(65536)
r = sc(103, 3, b, 65536)
if r.startswith("err"): report(r)
else: report("ok read %s bytes: %s" % (r[3:], b.value[:4000].decode("utf-8", "replace").replace("\n", " | ")))`)
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				o := attack.SysCheck(out, exit)
				if o.Contained {
					return o
				}
				// gVisor answers with its own synthetic log: what must
				// not show is the host's.
				if hv := hostKernelVersion(); hv != "" && !containsStr(out, hv) && containsStr(out, "gVisor") {
					return attack.Contained("the sandbox kernel's own log (gVisor), not the host's")
				}
				return o
			})),
	}
}
