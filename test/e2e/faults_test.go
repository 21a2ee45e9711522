package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/sandbox"
)

const sandboxMaxAllowRules = sandbox.MaxAllowRules

// faultStep is one cell of the error-injection matrix: an operation run
// with one named step made to fail (internal/failpoint's return term).
type faultStep struct {
	op, point string
	// setup makes what the operation works on; run is the operation.
	setup func(t *testing.T, f *faultEnv) string
	run   func(ctx context.Context, f *faultEnv, target string) error
	// check, if set, says what the failed operation must have left as
	// it was (beyond nothing leaked).
	check func(t *testing.T, f *faultEnv, target string)
	// background: run only starts the operation, which no request
	// waits for (a warm pool's refill); the point fails its first hit
	// only, and check sees what the failure left.
	background bool
	// streamed: the answer streams its progress, so an error after the
	// first output comes as its last frame (the status was 200 by then).
	streamed bool
	// term is the failpoint's action: return (the default), or panic (a
	// bug in a step: answered 500 like an error, and undone like one).
	term string
	// soak: the heavier half, run by make soak only
	// (TestSoakErrorInjectionMatrix); make test keeps at least one cell
	// of each operation.
	soak bool
}

type faultEnv struct {
	d  *daemon
	fp string // the daemon's BERTH_FAILPOINTS_FILE
}

func (f *faultEnv) arm(t *testing.T, spec string) {
	t.Helper()
	if err := os.WriteFile(f.fp, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
}

// faultMatrix is every multi-step operation with each of its named
// steps: create, fork, snapshot, restore, volume create, volume attach,
// network update, template build and import, create with secret files,
// a warm pool's refill, hibernate and wake (on runsc, the class that can
// checkpoint) and the secrets master key's rotation.
func faultMatrix() []faultStep {
	create := func(ctx context.Context, f *faultEnv, _ string) error {
		_, err := f.d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		return err
	}
	running := func(t *testing.T, f *faultEnv) string {
		t.Helper()
		sb, err := f.d.c.CreateSandbox(context.Background(), api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return sb.ID
	}
	stillRuns := func(t *testing.T, f *faultEnv, id string) {
		t.Helper()
		if out := execOut(t, f.d, id, "echo", "alive"); out != "alive\n" {
			t.Fatalf("sandbox %s after the failed operation: %q", id, out)
		}
	}
	fork := func(ctx context.Context, f *faultEnv, id string) error {
		_, err := f.d.c.Fork(ctx, id, api.ForkRequest{Count: 2})
		return err
	}
	snapshot := func(ctx context.Context, f *faultEnv, id string) error {
		_, err := f.d.c.CreateSnapshot(ctx, id, api.CreateSnapshotRequest{})
		return err
	}
	var steps []faultStep
	for _, p := range []string{"create.before-mount", "create.after-mount", "create.after-start"} {
		steps = append(steps, faultStep{op: "create", point: p, run: create})
	}
	steps = append(steps, faultStep{op: "create (panic)", point: "create.after-mount", term: "panic", run: create})
	for _, p := range []string{"fork.after-capture", "create.after-mount"} {
		steps = append(steps, faultStep{op: "fork", point: p, setup: running, run: fork, check: stillRuns})
	}
	persistent := func(t *testing.T, f *faultEnv) string {
		t.Helper()
		sb, err := f.d.c.CreateSandbox(context.Background(), api.CreateSandboxRequest{Persistent: true})
		if err != nil {
			t.Fatal(err)
		}
		return sb.ID
	}
	for _, p := range []string{"capture.frozen", "snapshot.after-capture"} {
		steps = append(steps, faultStep{op: "snapshot", point: p, setup: persistent, run: snapshot,
			check: func(t *testing.T, f *faultEnv, id string) {
				stillRuns(t, f, id)
				if sns, err := f.d.c.ListSnapshots(context.Background(), id); err != nil || len(sns) != 0 {
					t.Fatalf("snapshots after a failed snapshot: %v %v", sns, err)
				}
			}})
	}
	steps = append(steps, faultStep{op: "restore", point: "restore.before-revert",
		setup: func(t *testing.T, f *faultEnv) string {
			id := running(t, f)
			sn, err := f.d.c.CreateSnapshot(context.Background(), id, api.CreateSnapshotRequest{})
			if err != nil {
				t.Fatal(err)
			}
			return id + " " + sn.ID
		},
		run: func(ctx context.Context, f *faultEnv, target string) error {
			_, err := f.d.c.RestoreSnapshot(ctx, strings.Fields(target)[1])
			return err
		},
		check: func(t *testing.T, f *faultEnv, target string) {
			// A sandbox that ran runs again after the failed restore.
			stillRuns(t, f, strings.Fields(target)[0])
			if err := f.d.c.DeleteSnapshot(context.Background(), strings.Fields(target)[1]); err != nil {
				t.Fatal(err)
			}
		}})
	steps = append(steps, faultStep{op: "volume create", point: "volume.create.after-record",
		run: func(ctx context.Context, f *faultEnv, _ string) error {
			_, err := f.d.c.CreateVolume(ctx, api.CreateVolumeRequest{Name: "faulty"})
			return err
		},
		check: func(t *testing.T, f *faultEnv, _ string) {
			if vs, err := f.d.c.ListVolumes(context.Background()); err != nil || len(vs) != 0 {
				t.Fatalf("volumes after a failed create: %+v %v", vs, err)
			}
		}})
	steps = append(steps, faultStep{op: "network update", point: "network.rules.apply",
		setup: func(t *testing.T, f *faultEnv) string {
			sb, err := f.d.c.CreateSandbox(context.Background(), api.CreateSandboxRequest{Network: "egress", Allow: []string{"10.1.0.0/16"}})
			if err != nil {
				t.Fatal(err)
			}
			return sb.ID
		},
		run: func(ctx context.Context, f *faultEnv, id string) error {
			_, err := f.d.c.UpdateNetwork(ctx, id, api.NetworkRulesRequest{Allow: []string{"10.2.0.0/16"}, Deny: []string{"10.1.0.0/16"}})
			return err
		},
		check: func(t *testing.T, f *faultEnv, id string) {
			// The rules are those before the failed update.
			nr, err := f.d.c.Network(context.Background(), id)
			if err != nil || !slices.Equal(nr.Allow, []string{"10.1.0.0/16"}) {
				t.Fatalf("rules after a failed update: %+v %v", nr, err)
			}
		}})
	for _, p := range []string{"build.after-launch", "build.after-commit", "build.before-record"} {
		steps = append(steps, buildStep(p, p == "build.before-record"))
	}
	steps = append(steps, faultStep{op: "template import", point: "import.after-unpack",
		// The target is the OCI layout to import (no sandbox).
		setup: func(t *testing.T, f *faultEnv) string { return writeTestLayout(t, gnuTarUserImage(t)) },
		run: func(ctx context.Context, f *faultEnv, layout string) error {
			_, err := f.d.c.ImportTemplate(ctx, api.ImportTemplateRequest{Name: "faulted-import", Path: layout})
			return err
		},
		check: func(t *testing.T, f *faultEnv, _ string) {
			if tpl, err := f.d.c.GetTemplate(context.Background(), "faulted-import"); err == nil {
				t.Fatalf("a failed import left its template: %+v", tpl)
			}
		}})
	steps = append(steps, volumeAttachSteps()...)
	steps = append(steps, poolRefillSteps()...)
	steps = append(steps, hibernateSteps()...)
	steps = append(steps, rotationSteps()...)
	steps = append(steps, faultStep{op: "create with secret files", point: "secrets.deliver",
		setup: func(t *testing.T, f *faultEnv) string {
			if _, err := f.d.c.SetSecret(context.Background(), "FAULTS", "value-7c1e"); err != nil {
				t.Fatal(err)
			}
			return ""
		},
		run: func(ctx context.Context, f *faultEnv, _ string) error {
			_, err := f.d.c.CreateSandbox(ctx, api.CreateSandboxRequest{
				Secrets: []api.SecretRef{{Name: "FAULTS", File: "/run/secrets/faults"}}})
			return err
		}})
	return steps
}

// buildStep: a template build failing at point leaves no template and
// removes its build sandbox (the layers it made stay in the shared
// store, for the next build's cache).
func buildStep(point string, soak bool) faultStep {
	return faultStep{op: "template build", point: point, soak: soak, streamed: true,
		run: func(ctx context.Context, f *faultEnv, _ string) error {
			_, err := f.d.c.BuildTemplate(ctx, api.BuildTemplateRequest{Name: "faulted-build", From: "base", Run: []string{"touch /built"}}, nil)
			return err
		},
		check: func(t *testing.T, f *faultEnv, _ string) {
			if tpl, err := f.d.c.GetTemplate(context.Background(), "faulted-build"); err == nil {
				t.Fatalf("a failed build left its template: %+v", tpl)
			}
			// The build sandbox is hidden from lists: its record must
			// be gone (deleted), not running.
			waitFor(t, "the build sandbox removed", func() bool {
				ents, err := os.ReadDir(filepath.Join(f.d.dataDir, "sandboxes"))
				return err == nil && len(ents) == 0
			})
		}}
}

// TestErrorInjectionMatrix drives each multi-step operation through an
// error at each of its named steps, in one daemon armed through
// BERTH_FAILPOINTS_FILE: the operation fails with a 500 naming its
// request id, its partial work is undone (what it worked on is as before,
// nothing it made is left), doctor finds nothing and the leak check finds
// nothing once the cell's sandboxes are deleted. A background operation
// (a pool's refill) answers nothing: its cell checks what the failure
// left. make test runs every cell but the heavier half of the hibernate
// and wake ones (TestSoakErrorInjectionMatrix, make soak).
func TestErrorInjectionMatrix(t *testing.T) {
	parallel(t)
	runFaultMatrix(t, false)
}

// TestSoakErrorInjectionMatrix is the matrix's heavier half, run by make
// soak (BERTH_SOAK=1): every step of hibernate and wake on runsc that
// make test's matrix leaves out.
func TestSoakErrorInjectionMatrix(t *testing.T) {
	if os.Getenv("BERTH_SOAK") == "" {
		t.Skip("opt-in, the heavier half of the error-injection matrix: make soak (BERTH_SOAK=1)")
	}
	runFaultMatrix(t, true)
}

func runFaultMatrix(t *testing.T, soak bool) {
	base := t.TempDir()
	fp := filepath.Join(base, "failpoints")
	if err := os.WriteFile(fp, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	topo := newNetTopo(t) // the network update cell's egress sandbox lives there
	d := newDaemon(t, &daemon{netns: topo.host, env: []string{"BERTH_FAILPOINTS_FILE=" + fp}})
	// The hibernate and wake cells need runsc: missing, the matrix fails.
	if rep, err := d.c.Doctor(context.Background(), false); err != nil || !strings.Contains(rep.Runtime, "runsc") {
		t.Fatalf("the matrix's daemon offers no runsc class (%v): install it with scripts/install-runsc.sh (make deps runs it)", err)
	}
	f := &faultEnv{d: d, fp: fp}
	for i, st := range faultMatrix() {
		if st.soak != soak {
			continue
		}
		t.Run(st.op+"/"+st.point, func(t *testing.T) {
			ctx := context.Background()
			t.Cleanup(func() { // a failed cell leaves nothing to the next
				f.arm(t, "")
				if sbs, err := d.c.ListSandboxes(ctx, false); err == nil {
					for _, sb := range sbs {
						d.c.DeleteSandbox(ctx, sb.ID, true)
					}
				}
				if st.background && t.Failed() {
					d.c.SetPool(ctx, "base", 0)
					for range 300 { // best effort: the next cell's leak check tells
						if ents, err := os.ReadDir(filepath.Join(d.dataDir, "sandboxes")); err == nil && len(ents) == 0 {
							break
						}
						time.Sleep(100 * time.Millisecond)
					}
				}
			})
			f.arm(t, "")
			target := ""
			if st.setup != nil {
				target = st.setup(t, f)
			}
			// The message is the cell's own: the log line found below
			// is this cell's, not an earlier cell's at the same point.
			msg := fmt.Sprintf("injected by the matrix in cell %d", i)
			term := st.term
			if term == "" {
				term = "return"
			}
			if st.background {
				f.arm(t, st.point+"=1*"+term+"("+msg+")")
				if err := st.run(ctx, f, target); err != nil {
					t.Fatalf("%s: %v", st.op, err)
				}
			} else {
				f.arm(t, st.point+"="+term+"("+msg+")")
				err := st.run(ctx, f, target)
				f.arm(t, "")
				var ce *client.Error
				if !errors.As(err, &ce) || !(ce.Status == 500 || st.streamed && ce.Status == 0) || ce.Code != "internal" || ce.RequestID == "" ||
					!strings.Contains(ce.Message, ce.RequestID) {
					t.Fatalf("%s with %s failing answered %v (%+v)", st.op, st.point, err, ce)
				}
			}
			// The log line is written before the answer, but reaches this
			// process through a pipe another goroutine reads; a
			// background operation's when it comes to the step.
			why := "failpoint " + st.point + ": " + msg
			if st.background {
				waitFor(t, "the refill to come to "+st.point, func() bool { return strings.Contains(d.logs.String(), why) })
			} else if !waitLog(d, why) {
				t.Fatalf("the daemon's log does not say why %s failed", st.op)
			}
			f.arm(t, "")
			if st.check != nil {
				st.check(t, f, target)
			}
			// Nothing made by the failed operation is left: the only
			// live sandbox is the one the cell made to work on.
			sbs, err := d.c.ListSandboxes(ctx, false)
			if err != nil {
				t.Fatal(err)
			}
			for _, sb := range sbs {
				if target == "" || !strings.HasPrefix(target, sb.ID) {
					t.Errorf("sandbox %s (%s) left by the failed %s", sb.ID, sb.State, st.op)
				}
			}
			assertDoctorClean(t, d)
			for _, sb := range sbs {
				if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
					t.Fatal(err)
				}
			}
			assertNoLeaks(t, d)
		})
	}
}

// TestAllowRuleLimits: 1,000 allow rules are refused with 400
// limit_exceeded naming max_allow_rules, at create and at update (they
// answered 500 "netlink message too long" from about 145); the maximum is
// applied whole (its last rule, in the last netlink batch, lets traffic
// through) and enforced (that rule removed, the traffic is dropped).
func TestAllowRuleLimits(t *testing.T) {
	parallel(t)
	topo := newNetTopo(t)
	d := startDaemonIn(t, topo.host)
	ctx := context.Background()
	rules := func(n int) []string {
		out := make([]string, 0, n)
		for i := range n {
			out = append(out, fmt.Sprintf("tcp://10.%d.%d.0/24:%d", 100+i/250, i%250, 1000+i))
		}
		return out
	}
	wantLimit := func(what string, err error) {
		t.Helper()
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != 400 || ce.Code != "limit_exceeded" || ce.Limit != "max_allow_rules" ||
			!strings.Contains(ce.Message, "max_allow_rules") {
			t.Fatalf("%s with 1000 rules: %v (%+v)", what, err, ce)
		}
	}
	_, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Network: "egress", Allow: rules(1000)})
	wantLimit("create", err)

	const server = "tcp://198.51.100.2:8080"
	max := append(rules(sandboxMaxAllowRules-1), server)
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Network: "egress", Allow: max})
	if err != nil {
		t.Fatalf("create with the maximum of %d rules: %v", len(max), err)
	}
	_, err = d.c.UpdateNetwork(ctx, sb.ID, api.NetworkRulesRequest{Allow: rules(1000)})
	wantLimit("update", err)
	_, err = d.c.UpdateNetwork(ctx, sb.ID, api.NetworkRulesRequest{Allow: []string{"10.99.0.0/16"}})
	wantLimit("update past the maximum by one", err)
	fetch := func() (string, int) {
		var out strings.Builder
		exit, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"python3", "-c",
			"import urllib.request,sys\ntry:\n print(urllib.request.urlopen('http://198.51.100.2:8080/index.html', timeout=3).read().decode(), end='')\nexcept Exception as e:\n print('FAILED', type(e).__name__); sys.exit(1)"}}, &out, &out)
		if err != nil {
			t.Fatalf("exec: %v", err)
		}
		return out.String(), exit.Code
	}
	var body string
	var code int
	for range 30 { // the test server is starting
		if body, code = fetch(); code == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != 0 || body != "hello-from-the-test-internet\n" {
		t.Fatalf("the last of %d rules does not let its traffic through: %q", len(max), body)
	}
	if _, err := d.c.UpdateNetwork(ctx, sb.ID, api.NetworkRulesRequest{Deny: []string{server}}); err != nil {
		t.Fatal(err)
	}
	if out, code := fetch(); code == 0 {
		t.Fatalf("reachable after its rule was removed: %q", out)
	}
}

// TestE2BAllowRuleLimits: the E2B door refuses 1,000 allowOut entries with
// 400 naming max_allow_rules, as the REST API does (both answered 500
// "netlink message too long" from about 145 rules), and creates a sandbox
// with the maximum (its chain goes into the kernel in several netlink
// batches; a batch refused fails the create).
func TestE2BAllowRuleLimits(t *testing.T) {
	parallel(t)
	d, url, key := e2bDaemon(t)
	ctx := context.Background()
	rules := func(n int) []string {
		out := make([]string, 0, n)
		for i := range n {
			out = append(out, fmt.Sprintf("10.%d.%d.0/24", 200+i/125, 2*(i%125)))
		}
		return out
	}
	create := func(allow []string) (int, []byte) {
		t.Helper()
		// Every destination denied but the allowOut entries (E2B's
		// allowOut alone is an exception to nothing: all stays open).
		body, _ := json.Marshal(map[string]any{"templateID": "base", "timeout": 120,
			"network": map[string]any{"allowOut": allow, "denyOut": []string{"0.0.0.0/0"}}})
		req, err := http.NewRequestWithContext(ctx, "POST", url+"/v2/sandboxes", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-API-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}
	st, body := create(rules(1000))
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if st != 400 || json.Unmarshal(body, &e) != nil || e.Code != 400 || !strings.Contains(e.Message, "max_allow_rules") {
		t.Fatalf("create with 1000 allowOut entries: %d %s", st, body)
	}
	if sbs, err := d.c.ListSandboxes(ctx, true); err != nil || len(sbs) != 0 {
		t.Fatalf("a refused create left %d sandboxes (%v)", len(sbs), err)
	}

	max := rules(sandboxMaxAllowRules)
	st, body = create(max)
	var c struct{ SandboxID string }
	if st != 201 || json.Unmarshal(body, &c) != nil || c.SandboxID == "" {
		t.Fatalf("create with the maximum of %d allowOut entries: %d %s", len(max), st, body)
	}
	sb, err := d.c.GetSandbox(ctx, c.SandboxID)
	if err != nil || len(sb.Allow) != len(max) {
		t.Fatalf("the sandbox made with %d rules: %v, %d rules", len(max), err, len(sb.Allow))
	}
	if _, err := d.c.DeleteSandbox(ctx, c.SandboxID, false); err != nil {
		t.Fatal(err)
	}
}
