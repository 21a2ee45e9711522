package e2e

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// TestSudo (#33) drives berth's sudo (internal/agent/sudo) in a sandbox
// created with it, on both runtime classes: the sandbox's user gets root
// with the common options, exit codes and signals come back, stdin is the
// caller's, a caller of another uid is refused, the command ends with
// its caller; a sandbox created without it has no sudo at all.
func TestSudo(t *testing.T) {
	parallel(t)
	d := startRunscDaemon(t)
	ctx := context.Background()
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: rt, User: "user", Sudo: true})
			if err != nil {
				t.Fatal(err)
			}
			if !sb.Sudo {
				t.Errorf("the sandbox's record does not say sudo: %+v", sb)
			}
			run := func(user, script string, env map[string]string, stdin string) (string, string, int) {
				t.Helper()
				var out, errb strings.Builder
				req := api.ExecRequest{Cmd: []string{"sh", "-c", script}, User: user, Env: env}
				if stdin != "" {
					req.Stdin = []byte(stdin)
				}
				exit, err := d.c.Exec(ctx, sb.ID, req, &out, &errb)
				if err != nil {
					t.Fatalf("exec %q: %v", script, err)
				}
				return strings.TrimSpace(out.String()), strings.TrimSpace(errb.String()), exit.Code
			}
			for _, tc := range []struct {
				script, want string
				code         int
				env          map[string]string
				stdin        string
			}{
				{script: "id -u; sudo id -u; sudo -n id -un", want: "1000\n0\nroot"},
				{script: "sudo echo hi", want: "hi"},
				{script: "sudo sh -c 'echo made > /root/by-sudo; stat -c %u /root/by-sudo'; cat /root/by-sudo 2>/dev/null || echo unreadable", want: "0\nunreadable"},
				{script: "sudo env | grep -c '^FOO=' || true; sudo -E env | grep '^FOO='", want: "0\nFOO=bar", env: map[string]string{"FOO": "bar"}},
				{script: "sudo env | grep -E '^(HOME|USER|SUDO_USER|SUDO_UID)=' | sort", want: "HOME=/root\nSUDO_UID=1000\nSUDO_USER=user\nUSER=root"},
				{script: "sudo -u user id -u; sudo -u user sudo id -u", want: "1000\n0"},
				{script: "sudo BAR=1 sh -c 'echo $BAR'", want: "1"},
				{script: "cd /tmp && sudo pwd", want: "/tmp"},
				{script: "sudo -i pwd", want: "/root"},
				{script: "sudo cat", want: "from stdin", stdin: "from stdin"},
				{script: "sudo echo closed-stdin <&-", want: "closed-stdin"},
				{script: "sudo sh -c 'exit 7'", code: 7},
				{script: "sudo sh -c 'kill -TERM $$'; echo $?", want: "143"},
				{script: "sudo -g root id 2>&1", want: "sudo: option -g is not supported by berth's sudo", code: 1},
				{script: "sudo no-such-command 2>&1", want: "sudo: no-such-command: command not found", code: 1},
				{script: "sudo -V >/dev/null && sudo -v && sudo -l | tail -1", want: "(ALL : ALL) NOPASSWD: ALL"},
			} {
				out, errs, code := run("", tc.script, tc.env, tc.stdin)
				if out != tc.want || code != tc.code {
					t.Errorf("%s: %q (exit %d, stderr %q), want %q (exit %d)", tc.script, out, code, errs, tc.want, tc.code)
				}
			}
			// Root may use it too; another uid may not, and is told why.
			if out, _, code := run("root", "sudo -u user id -un", nil, ""); out != "user" || code != 0 {
				t.Errorf("root's sudo -u user: %q (exit %d)", out, code)
			}
			if out, _, code := run("65534", "sudo id -u 2>&1", nil, ""); code != 1 || !strings.Contains(out, "uid 65534 may not use sudo") {
				t.Errorf("sudo as uid 65534: %q (exit %d), want a refusal", out, code)
			}
			// A command outlives no caller: an exec that times out takes
			// its sudo command with it.
			var out strings.Builder
			exit, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sudo", "sleep", "1234"}, TimeoutSeconds: 1}, &out, io.Discard)
			if err != nil || !exit.TimedOut {
				t.Fatalf("sudo sleep under a timeout: %+v %v", exit, err)
			}
			count := "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 1234' || true"
			deadline := time.Now().Add(10 * time.Second)
			for {
				n, _, _ := run("root", count, nil, "")
				if n == "0" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the sudo command still runs after its caller was killed (%s left)", n)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
				t.Fatal(err)
			}

			// Without the flag: no sudo program, no socket.
			plain, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: rt, User: "user"})
			if err != nil {
				t.Fatal(err)
			}
			if plain.Sudo {
				t.Error("a sandbox created without sudo says it has it")
			}
			o, _, code := run2(t, d, plain.ID, "command -v sudo; ls /.berth/bin 2>&1 | head -1; "+
				`python3 -c "import socket; s = socket.socket(socket.AF_UNIX); s.connect('\0berth-sudo')" 2>&1 | tail -1`)
			if code != 0 || strings.Contains(o, "/sudo") || !strings.Contains(o, "ConnectionRefusedError") {
				t.Errorf("a sandbox without sudo: %q (exit %d), want no sudo and a refused connection", o, code)
			}
			if _, err := d.c.DeleteSandbox(ctx, plain.ID, true); err != nil {
				t.Fatal(err)
			}
		})
	}
	assertNoLeaks(t, d)
}

func run2(t *testing.T, d *daemon, id, script string) (string, string, int) {
	t.Helper()
	var out, errb strings.Builder
	exit, err := d.c.Exec(context.Background(), id, api.ExecRequest{Cmd: []string{"sh", "-c", script}}, &out, &errb)
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return strings.TrimSpace(out.String()), strings.TrimSpace(errb.String()), exit.Code
}
