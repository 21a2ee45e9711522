package catalogue

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/selftest/attack"
)

// DocumentedCaps are the capabilities root inside a sandbox keeps
// (docs/isolation.md, "The runc class"), with their bit numbers.
var DocumentedCaps = map[string]uint{
	"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_FOWNER": 3, "CAP_FSETID": 4, "CAP_KILL": 5,
	"CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8, "CAP_NET_BIND_SERVICE": 10,
	"CAP_SYS_CHROOT": 18, "CAP_AUDIT_WRITE": 29,
}

// DocumentedCapMask is DocumentedCaps as a /proc/PID/status mask.
func DocumentedCapMask() uint64 {
	var m uint64
	for _, b := range DocumentedCaps {
		m |= 1 << b
	}
	return m
}

// statusField returns a field of a /proc/PID/status dump.
func statusField(out, field string) string {
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func capsAttacks() []*attack.Attack {
	const g = "caps"
	c := func(id, desc, expected string, run func(ctx ctxT, e *attack.Env) attack.Outcome, classes ...string) *attack.Attack {
		return &attack.Attack{ID: "caps." + id, Category: attack.CatCaps, Description: desc, Expected: expected, Run: run, Classes: classes}
	}
	want := fmt.Sprintf("%016x", DocumentedCapMask())
	field := func(file, name, wantV string) func(ctxT, *attack.Env) attack.Outcome {
		return attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
			out, _, err := e.Sh(ctx, sb.ID, "cat "+file)
			if err != nil {
				return attack.Escaped("exec failed: %v", err)
			}
			got := statusField(out, name)
			return attack.Judged(got == wantV, "%s %s: %s", file, name, got)
		})
	}
	return []*attack.Attack{
		c("cap-eff", "CapEff of root in the sandbox", "exactly the 11 documented caps ("+want+")", field("/proc/self/status", "CapEff", want)),
		c("cap-bnd", "CapBnd: the bounding set a setuid or file-caps binary could reach", "the same 11 caps", field("/proc/self/status", "CapBnd", want)),
		c("cap-amb-inh", "CapAmb and CapInh", "empty",
			attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				out, _, err := e.Sh(ctx, sb.ID, "cat /proc/self/status")
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				a, i := statusField(out, "CapAmb"), statusField(out, "CapInh")
				return attack.Judged(a == "0000000000000000" && i == "0000000000000000", "CapAmb %s CapInh %s", a, i)
			})),
		c("no-new-privs", "NoNewPrivs of an exec'd process", "1", field("/proc/self/status", "NoNewPrivs", "1")),
		c("seccomp", "Seccomp mode of an exec'd process", "2 (filter)", field("/proc/self/status", "Seccomp", "2"), attack.Runc, attack.Kata),
		c("seccomp-pid1", "Seccomp mode and NoNewPrivs of the agent (pid 1)", "2 and 1",
			attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				out, _, err := e.Sh(ctx, sb.ID, "cat /proc/1/status")
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				s, n := statusField(out, "Seccomp"), statusField(out, "NoNewPrivs")
				return attack.Judged(s == "2" && n == "1", "pid 1 Seccomp %s NoNewPrivs %s", s, n)
			}), attack.Runc, attack.Kata),
		c("setuid-binary", "a setuid-root copy of id run as nobody", "euid stays 65534 (no_new_privs)",
			attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				out, exit, err := e.Sh(ctx, sb.ID, `cp /usr/bin/id /tmp/st-id && chmod 4755 /tmp/st-id && setpriv --reuid=65534 --regid=65534 --clear-groups /tmp/st-id -u`)
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				got := strings.TrimSpace(out)
				if exit.Code != 0 {
					return attack.Escaped("could not run the attack: %s", attack.DescribeExit(out, exit))
				}
				return attack.Judged(got == "65534", "euid %s", got)
			})),
		c("setfcap", "setxattr security.capability (CAP_SYS_ADMIN file cap) on a copied binary", "EPERM: no CAP_SETFCAP",
			attack.Py(g, `import shutil; shutil.copy("/usr/bin/true", "/tmp/st-fcap")
v = struct.pack("<IIIII", 0x02000001, 1 << 21, 0, 0, 0)
report(oserr(lambda: os.setxattr("/tmp/st-fcap", "security.capability", v)))`)),
		c("capset-raise", "capset() adding CAP_SYS_ADMIN to the effective set", "EPERM",
			attack.Py(g, `hdr = (ctypes.c_uint32 * 2)(0x20080522, 0); d = (ctypes.c_uint32 * 6)()
r = sc(125, hdr, d)
d[0] |= 1 << 21; d[1] |= 1 << 21
report(sc(126, hdr, d))`)),
		c("uid-map", "/proc/self/uid_map: what sandbox root is on the host", "root maps to an unprivileged host uid",
			attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				out, _, err := e.Sh(ctx, sb.ID, "cat /proc/self/uid_map")
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				f := strings.Fields(out)
				if len(f) < 3 {
					return attack.Escaped("uid_map %q", out)
				}
				host, _ := strconv.Atoi(f[1])
				return attack.Judged(f[0] == "0" && host != 0, "uid 0 -> host uid %d (%s ids)", host, f[2])
			}), attack.Runc, attack.Kata),
		c("isolation-record", "the sandbox's isolation as the API reports it", "user ns, no_new_privs, the 11 caps",
			attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				got, err := e.C.GetSandbox(ctx, sb.ID)
				if err != nil {
					return attack.Escaped("get: %v", err)
				}
				return isolationOK(got.Isolation)
			})),
	}
}

func isolationOK(iso api.Isolation) attack.Outcome {
	var bad []string
	if !iso.UserNamespace {
		bad = append(bad, "no user namespace")
	}
	if !iso.NoNewPrivs {
		bad = append(bad, "no_new_privileges false")
	}
	caps := slices.Clone(iso.Capabilities)
	for i, c := range caps {
		caps[i] = strings.ToUpper(c)
		if !strings.HasPrefix(caps[i], "CAP_") {
			caps[i] = "CAP_" + caps[i]
		}
	}
	for _, c := range caps {
		if _, ok := DocumentedCaps[c]; !ok {
			bad = append(bad, "extra "+c)
		}
	}
	if len(caps) != len(DocumentedCaps) {
		bad = append(bad, fmt.Sprintf("%d caps", len(caps)))
	}
	if len(bad) > 0 {
		return attack.Escaped("%s", strings.Join(bad, ", "))
	}
	return attack.Contained("runtime %s, seccomp %s, user ns, no_new_privs, %d caps", iso.Runtime, iso.Seccomp, len(caps))
}
