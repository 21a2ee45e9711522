package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/cgroups"
	"github.com/berth-sh/berth/internal/node/local"
)

// agentClasses returns the runtime classes the daemon offers, runc first.
func agentClasses(t *testing.T, d *daemon) []string {
	t.Helper()
	rep, err := d.c.Doctor(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	classes := []string{"runc"}
	if strings.Contains(rep.Runtime, "runsc") {
		classes = append(classes, "runsc")
	} else if os.Getenv("CI") != "" {
		t.Errorf("CI: the daemon offers no runsc class (%s); the agent channel is untested there", rep.Runtime)
	}
	return classes
}

// runIn runs a shell script in a sandbox and returns its output, exit code
// and error.
func runIn(d *daemon, id, script string, env map[string]string) (string, int, error) {
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ex, err := d.c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"sh", "-c", script}, Env: env, TimeoutSeconds: 30}, &out, &out)
	return out.String(), ex.Code, err
}

// TestAgentChannelBoundary attacks, from inside sandboxes of every class,
// the channel between the daemon and the agent and the agent process
// itself (issue: the boundary against a hostile tenant).
func TestAgentChannelBoundary(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	for _, class := range agentClasses(t, d) {
		t.Run(class, func(t *testing.T) {
			mk := func() string {
				sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: class})
				if err != nil {
					t.Fatal(err)
				}
				return sb.ID
			}
			attacker, victim := mk(), mk()
			must := func(id, script string) string {
				t.Helper()
				out, code, err := runIn(d, id, script, nil)
				if err != nil || code != 0 {
					t.Fatalf("%s: exit %d, %v: %s", script, code, err, out)
				}
				return out
			}

			// Nothing the sandbox sees names a host path: not the data
			// dir (overlay layers, sockets, resolv.conf), not where the
			// berth binary lives.
			mi := must(attacker, "cat /proc/self/mountinfo /proc/1/mountinfo")
			for _, host := range []string{d.dataDir, filepath.Dir(d.dataDir), filepath.Dir(berthBin)} {
				if strings.Contains(mi, host) {
					t.Errorf("mountinfo names host path %s:\n%s", host, mi)
				}
			}

			// The agent (PID 1) is out of reach: no ptrace, no
			// /proc/1/{mem,environ,fd}, and no signal stops it. (gVisor
			// does not keep SIGKILL and SIGSTOP from its init as Linux
			// does: there they end or stop the sandbox itself, which
			// harms nobody else and the daemon's own deadlines contain;
			// see TestExecTimeoutIsTheDaemons and docs/gvisor.md.)
			sigs := "TERM INT HUP USR1 USR2 QUIT PWR ABRT TRAP SYS SEGV BUS ALRM URG CHLD"
			if class == "runc" {
				sigs += " STOP KILL"
			}
			out := must(attacker, `
for f in /proc/1/environ /proc/1/mem /proc/1/fd/3 /proc/1/exe; do
  if head -c 1 $f >/dev/null 2>&1; then echo "READ $f"; fi
done
if ls -l /proc/1/fd/ 2>/dev/null | grep -q -- '->'; then echo "READ fd links"; fi
python3 - <<'EOF'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for req, name in ((16, "PTRACE_ATTACH"), (0x4206, "PTRACE_SEIZE")):
    if libc.ptrace(req, 1, 0, 0) == 0:
        print("TRACED", name)
EOF
for s in `+sigs+`; do kill -$s 1 2>/dev/null; done
sleep 0.3
echo done`)
			if strings.Contains(out, "READ") || strings.Contains(out, "TRACED") || !strings.Contains(out, "done") {
				t.Errorf("the agent is within the sandbox's reach:\n%s", out)
			}
			if out := must(attacker, "echo still-serving"); !strings.Contains(out, "still-serving") {
				t.Errorf("agent after signals: %q", out)
			}

			// Socket replacement: every socket under /.berth is
			// replaced, for two seconds, by a symlink to the victim's
			// agent socket and then to the daemon's own API socket;
			// then put back. An exec meanwhile must not run in the
			// victim (nor reach the daemon's API): it fails, or, where
			// the sandbox holds no agent socket at all, runs where it
			// was sent.
			victimSock := filepath.Join(d.dataDir, "sandboxes", victim, "run", "agent.sock")
			for _, target := range []string{victimSock, d.socket} {
				must(attacker, fmt.Sprintf(`
rm -f /tmp/ran-here
nohup sh -c '
  socks=$(find /.berth -type s 2>/dev/null)
  for s in $socks; do mv $s $s.real && ln -s %s $s; done
  echo "$socks" > /tmp/swapped
  sleep 2
  for s in $socks; do rm -f $s; mv $s.real $s; done
' >/dev/null 2>&1 &
sleep 0.3`, target))
				time.Sleep(200 * time.Millisecond)
				_, _, err := runIn(d, attacker, "touch /tmp/ran-here", map[string]string{"SECRET": "topsecret"})
				time.Sleep(2200 * time.Millisecond)
				if out, _, _ := runIn(d, victim, "test -e /tmp/ran-here && echo VICTIM-RAN", nil); strings.Contains(out, "VICTIM-RAN") {
					t.Fatalf("an exec for the attacker ran in the victim sandbox (symlink to %s)", target)
				}
				swapped := must(attacker, "cat /tmp/swapped; test -e /tmp/ran-here && echo ATTACKER-RAN || true")
				hadSocket := strings.Contains(swapped, "agent.sock")
				switch {
				case hadSocket && err == nil && !strings.Contains(swapped, "ATTACKER-RAN"):
					t.Errorf("exec through a replaced socket reported success but ran nowhere")
				case !hadSocket && err != nil:
					t.Errorf("no agent socket in the sandbox, yet the exec failed: %v", err)
				}
				if class == "runc" && hadSocket {
					t.Errorf("runc sandbox can see an agent socket: %s", swapped)
				}
			}

			// An impostor agent: the real socket moved away, a listener
			// in its place records what it is sent, then the real one
			// comes back. The daemon must never hand it a request.
			must(attacker, `
rm -f /tmp/captured
mkdir -p /.berth/run 2>/dev/null
cat > /tmp/impostor.py <<'EOF'
import os, socket, time
path = "/.berth/run/agent.sock"
had = os.path.exists(path)
if had:
    os.rename(path, path + ".real")
s = socket.socket(socket.AF_UNIX)
try:
    os.unlink(path)
except OSError:
    pass
s.bind(path)
s.listen(16)
s.settimeout(0.2)
end = time.time() + 2
with open("/tmp/captured", "wb") as out:
    while time.time() < end:
        try:
            c, _ = s.accept()
        except socket.timeout:
            continue
        c.settimeout(0.5)
        try:
            out.write(c.recv(65536))
        except OSError:
            pass
        c.close()
s.close()
os.unlink(path)
if had:
    os.rename(path + ".real", path)
EOF
nohup python3 /tmp/impostor.py >/dev/null 2>&1 &
sleep 0.3`)
			time.Sleep(200 * time.Millisecond)
			_, _, _ = runIn(d, attacker, "echo hello", map[string]string{"SECRET": "topsecret"})
			time.Sleep(2200 * time.Millisecond)
			if got := must(attacker, "cat /tmp/captured 2>/dev/null; echo"); strings.Contains(got, "topsecret") || strings.Contains(got, `"op"`) {
				t.Fatalf("an impostor agent received the daemon's request: %q", got)
			}
			must(attacker, "echo the real agent is back")

			if class == "runsc" {
				evs, err := d.c.Events(ctx, attacker)
				if err != nil {
					t.Fatal(err)
				}
				found := false
				for _, ev := range evs {
					found = found || (ev.Type == "security" && ev.Outcome == "refused")
				}
				if !found {
					t.Errorf("no security event recorded for the refused agent socket: %+v", evs)
				}
				if m := daemonMetrics(t, d); !regexp.MustCompile(`(?m)^berth_agent_channel_refused_total [1-9]`).MatchString(m) {
					t.Errorf("refusals are not counted in /metrics:\n%s", m)
				}
			}
			for _, id := range []string{attacker, victim} {
				if _, err := d.c.DeleteSandbox(ctx, id, true); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// daemonMetrics fetches the daemon's /metrics over its unix socket.
func daemonMetrics(t *testing.T, d *daemon) string {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", d.socket)
	}}}
	resp, err := hc.Get("http://berth/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestExecTimeoutIsTheDaemons: an agent that never answers (stopped from
// the host here) does not hold an exec past its timeout by more than a
// second; the daemon then ends the sandbox's processes from the host.
func TestExecTimeoutIsTheDaemons(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	for _, class := range agentClasses(t, d) {
		t.Run(class, func(t *testing.T) {
			sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: class})
			if err != nil {
				t.Fatal(err)
			}
			cg := "/" + local.InstanceName(d.dataDir) + "/" + sb.ID
			pids := cgroups.Procs(cg)
			if len(pids) == 0 {
				t.Fatalf("no processes in %s", cg)
			}
			// Every process of the sandbox stops: the agent cannot
			// answer, nor kill the command at its timeout.
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGSTOP)
			}
			begin := time.Now()
			var out strings.Builder
			ex, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sleep", "30"}, TimeoutSeconds: 2}, &out, &out)
			took := time.Since(begin)
			if took > 3*time.Second {
				t.Errorf("exec with a 2 s timeout held for %v by an agent that does not answer", took)
			}
			if err == nil && !ex.TimedOut {
				t.Errorf("exec past its timeout: %+v, want timed_out", ex)
			}
			// The sandbox's processes are ended from the host and the
			// ephemeral sandbox goes.
			deadline := time.Now().Add(15 * time.Second)
			for {
				got, err := d.c.GetSandbox(ctx, sb.ID)
				if err == nil && (got.State == "deleted" || got.State == "failed") && len(cgroups.Procs(cg)) == 0 {
					break
				}
				if time.Now().After(deadline) {
					st := "?"
					if got != nil {
						st = got.State
					}
					t.Fatalf("sandbox %s still %s with %d processes after its agent hung", sb.ID, st, len(cgroups.Procs(cg)))
				}
				time.Sleep(100 * time.Millisecond)
			}
			evs, _ := d.c.Events(ctx, sb.ID)
			killed := false
			for _, ev := range evs {
				killed = killed || (ev.Type == "security" && ev.Outcome == "killed")
			}
			if !killed {
				t.Errorf("no event says the hung agent's sandbox was ended: %+v", evs)
			}
		})
	}
}
