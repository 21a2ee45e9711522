package e2e

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
)

// TestSecurityBoundary checks, from inside a real sandbox, the isolation
// its spec promises. Each command must fail (or report the safe value).
func TestSecurityBoundary(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	run := func(cmd string) (string, int) {
		var out strings.Builder
		exit, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sh", "-c", cmd}, TimeoutSeconds: 20}, &out, &out)
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		return out.String(), exit.Code
	}
	mustFail := map[string]string{
		"mount tmpfs":           "mount -t tmpfs none /mnt",
		"write /proc/sys":       "echo 1 > /proc/sys/kernel/panic",
		"write /sys":            "echo x > /sys/kernel/uevent_helper",
		"write host /usr":       "touch /usr/bin/berth-was-here",
		"new user namespace":    "unshare -U true",
		"mknod":                 "mknod /tmp/sda b 8 0",
		"raw socket":            "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)'",
		"load kernel module":    "python3 -c 'import ctypes; l=ctypes.CDLL(None); import sys; sys.exit(0 if l.syscall(175, 0, 0, 0)==0 else 1)'",
		"read kcore":            "head -c 1 /proc/kcore",
		"change hostname of ns": "hostname pwned",
		"chroot escape tools":   "test -e /var/lib/berth || test -e /proc/1/root/../../../../etc/shadow && exit 0; exit 1",
		"see host processes":    "ps -eo args | grep -v grep | grep -q 'berth serve' && exit 0; test $(ps -e | wc -l) -gt 8",
		"write agent binary":    "echo x >> /.berth/berth",
		"use a keyring":         "python3 -c 'import ctypes,sys; l=ctypes.CDLL(None); sys.exit(0 if l.syscall(250, 0, -3, 0) >= 0 else 1)'",
		"setuid escalation":     "cp /usr/bin/id /tmp/id && chmod u+s /tmp/id && su -s /bin/sh nobody -c /tmp/id | grep -q 'euid=0' && exit 0 || exit 1",
	}
	for name, cmd := range mustFail {
		if out, code := run(cmd); code == 0 {
			t.Errorf("%s succeeded inside the sandbox: %q", name, out)
		}
	}
	checks := map[string]string{
		"grep NoNewPrivs /proc/self/status":              "NoNewPrivs:\t1",
		"grep Seccomp: /proc/self/status":                "Seccomp:\t2",
		"grep -E '^(Seccomp|NoNewPrivs)' /proc/1/status": "NoNewPrivs:\t1\nSeccomp:\t2",
		// Docker's profile answers clone3 with ENOSYS (so that libcs fall
		// back to clone, whose namespace flags it can check); unfiltered,
		// clone3(NULL, 0) is EINVAL.
		"python3 -c 'import ctypes,os;l=ctypes.CDLL(None,use_errno=True);l.syscall(435,0,0);print(os.strerror(ctypes.get_errno()))'": "Function not implemented",
		"python3 -c 'import ctypes,os;l=ctypes.CDLL(None,use_errno=True);l.socket(40,1,0);print(os.strerror(ctypes.get_errno()))'":   "Operation not permitted",
		// The agent installs the filter itself (TSYNC): every one of its
		// threads must carry it.
		"n=0; bad=0; for f in /proc/1/task/*/status; do grep -q '^Seccomp:.2' $f || bad=1; n=$((n+1)); done; test $n -gt 1 && test $bad = 0 && echo all-threads-filtered": "all-threads-filtered",
		"grep CapEff /proc/self/status":                                   "CapEff:\t00000000200405fb",
		"ls /sys/fs/cgroup 2>/dev/null | wc -l":                           "0",
		"cat /proc/1/cmdline | tr '\\0' ' '":                              "/.berth/berth --listen-fd 3 --seccomp-fd 4",
		"ip -o link 2>/dev/null | wc -l; cat /sys/class/net/lo/operstate": "1\nunknown",
	}
	// Its own host range (see TestHostIDsPerSandbox), never host root's.
	if iso := sb.Isolation; iso.IDMode != "per-sandbox" || iso.HostUID <= 100000000 || iso.HostIDs != 65536 {
		t.Errorf("isolation ids: %+v", iso)
	}
	checks["cat /proc/self/uid_map /proc/self/gid_map"] = fmt.Sprintf("0 %d 65536 0 %d 65536", sb.Isolation.HostUID, sb.Isolation.HostGID)
	for cmd, want := range checks {
		out, _ := run(cmd)
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("%s: got %q, want %q", cmd, out, want)
		}
	}
	_ = io.Discard
}
