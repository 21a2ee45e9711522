package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// The code interpreter's kernels beyond Python (#33): JavaScript and
// TypeScript (Deno's kernel), R (IRkernel), Bash (berth's own), each with
// E2B's conventions for results, per-execution env_vars and the working
// directory; the default contexts; a language not offered.
func TestCodeInterpreterKernels(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "code-interpreter-v1",
		Env: map[string]string{"SANDBOX_VAR": "from-sandbox"}})
	if err != nil {
		t.Fatal(err)
	}
	hc := unixHTTP(d)
	hc.Timeout = 90 * time.Second
	c := &interpClient{t: t, d: d, id: sb.ID, hc: hc, base: fmt.Sprintf("http://berth/v1/sandboxes/%s/ports/49999", sb.ID)}

	// The first request after create already sees both default contexts,
	// python's first, as E2B's server lists them.
	code, b := c.do("GET", "/contexts", nil)
	var list []struct{ ID, Language, Cwd string }
	if code != 200 || json.Unmarshal(b, &list) != nil || len(list) != 2 || list[0].Language != "python" || list[1].Language != "javascript" {
		t.Fatalf("contexts right after create: %d %s", code, b)
	}

	stdout := func(ms []map[string]any) string {
		t.Helper()
		var s strings.Builder
		for _, m := range ofType(ms, "stdout") {
			s.WriteString(m["text"].(string))
		}
		return s.String()
	}
	text := func(ms []map[string]any) string {
		t.Helper()
		for _, m := range ofType(ms, "result") {
			if s, ok := m["text"].(string); ok {
				return s
			}
		}
		out, _, _ := c.d.cli("logs", c.id, "service")
		t.Fatalf("no result with text in %v\nthe service's output:\n%s", ms, out)
		return ""
	}
	noError := func(what string, ms []map[string]any) []map[string]any {
		t.Helper()
		if errs := ofType(ms, "error"); len(errs) > 0 {
			t.Fatalf("%s: %v", what, errs)
		}
		return ms
	}

	// JavaScript: stdout, ES modules, top-level await (a string result
	// as the string), state across cells, the sandbox's environment.
	js := func(code string, extra ...map[string]any) []map[string]any {
		req := map[string]any{"code": code, "language": "js"}
		for _, e := range extra {
			for k, v := range e {
				req[k] = v
			}
		}
		return noError(code, c.exec(req))
	}
	if got := stdout(js(`console.log("hello from js")`)); got != "hello from js\n" {
		t.Errorf("console.log: %q", got)
	}
	if got := stdout(js("import { readFileSync } from 'node:fs'\nconsole.log(typeof readFileSync)")); got != "function\n" {
		t.Errorf("an ES module import: %q", got)
	}
	if got := text(js(`await Promise.resolve("resolved")`)); got != "resolved" {
		t.Errorf("top-level await: %q", got)
	}
	js("let kept = 41")
	if got := text(js("kept + 1")); got != "42" {
		t.Errorf("state across cells: %q", got)
	}
	if got := text(js("process.env.SANDBOX_VAR")); got != "from-sandbox" {
		t.Errorf("the sandbox's env in js: %q", got)
	}
	if got := text(js("process.cwd()")); got != "/workspace" {
		t.Errorf("js cwd: %q", got)
	}
	// env_vars hold for one execution, then the sandbox's value is back.
	if got := text(js("process.env.SANDBOX_VAR + ' ' + process.env.ONLY_NOW", map[string]any{
		"env_vars": map[string]string{"SANDBOX_VAR": "over", "ONLY_NOW": `it's "quoted"`}})); got != `over it's "quoted"` {
		t.Errorf("js env_vars: %q", got)
	}
	if got := text(js("process.env.SANDBOX_VAR + ' ' + (process.env.ONLY_NOW ?? 'unset')")); got != "from-sandbox unset" {
		t.Errorf("js env after its execution: %q", got)
	}
	errs := ofType(c.exec(map[string]any{"code": `throw new TypeError("js boom")`, "language": "javascript"}), "error")
	if len(errs) != 1 || errs[0]["name"] != "TypeError" || errs[0]["value"] != "js boom" {
		t.Errorf("a thrown error: %v", errs)
	}

	// TypeScript: its own default context, type annotations run.
	if got := stdout(noError("ts", c.exec(map[string]any{"code": `const m: string = "typed"; console.log(m)`, "language": "ts"}))); got != "typed\n" {
		t.Errorf("typescript: %q", got)
	}
	code, b = c.do("POST", "/contexts", map[string]any{"language": "ts", "cwd": "/tmp"})
	var tsx struct{ ID, Language, Cwd string }
	if code != 200 || json.Unmarshal(b, &tsx) != nil || tsx.Language != "typescript" || tsx.Cwd != "/tmp" {
		t.Fatalf("a typescript context: %d %s", code, b)
	}
	if got := text(noError("ts cwd", c.exec(map[string]any{"code": "Deno.cwd()", "context_id": tsx.ID}))); got != "/tmp" {
		t.Errorf("the typescript context's cwd: %q", got)
	}

	// R: IRkernel's results, env_vars.
	r := func(code string, env map[string]string) []map[string]any {
		req := map[string]any{"code": code, "language": "r"}
		if env != nil {
			req["env_vars"] = env
		}
		return noError(code, c.exec(req))
	}
	if got := strings.TrimSpace(text(r(`Sys.getenv("SANDBOX_VAR")`, nil))); got != `[1] "from-sandbox"` {
		t.Errorf("R, the sandbox's env: %q", got)
	}
	if got := strings.TrimSpace(text(r(`Sys.getenv("R_ONLY")`, map[string]string{"R_ONLY": `a "b" \ c`}))); got != `[1] "a \"b\" \\ c"` {
		t.Errorf("R env_vars: %q", got)
	}
	if got := strings.TrimSpace(text(r(`Sys.getenv("R_ONLY", unset = "gone")`, nil))); got != `[1] "gone"` {
		t.Errorf("R env after its execution: %q", got)
	}
	if got := strings.TrimSpace(text(r("y <- c(1, 2, 3)\nsum(y) * 2", nil))); got != "[1] 12" {
		t.Errorf("R arithmetic: %q", got)
	}

	// Bash: a shell that lasts across cells, stdout and stderr apart, an
	// exit status as the error, stdin at EOF, exit ends only that shell.
	sh := func(code string, env map[string]string) []map[string]any {
		req := map[string]any{"code": code, "language": "bash"}
		if env != nil {
			req["env_vars"] = env
		}
		return c.exec(req)
	}
	if got := stdout(noError("echo", sh("echo $SANDBOX_VAR; echo \"$ONLY\"", map[string]string{"ONLY": "it's here"}))); got != "from-sandbox\nit's here\n" {
		t.Errorf("bash env: %q", got)
	}
	if got := stdout(noError("after", sh(`echo "${ONLY:-unset}"; pwd; cd /tmp; kept=7`, nil))); got != "unset\n/workspace\n" {
		t.Errorf("bash after env_vars: %q", got)
	}
	ms := sh(`echo "$kept $(pwd)"; echo to-stderr >&2; cat; false`, nil)
	if got := stdout(ms); got != "7 /tmp\n" {
		t.Errorf("bash state: %q", got)
	}
	if e := ofType(ms, "stderr"); len(e) != 1 || e[0]["text"] != "to-stderr\n" {
		t.Errorf("bash stderr: %v", e)
	}
	if errs := ofType(ms, "error"); len(errs) != 1 || errs[0]["value"] != "1" {
		t.Errorf("bash exit status: %v", errs)
	}
	if errs := ofType(sh("exit 3", nil), "error"); len(errs) != 1 || errs[0]["value"] != "3" {
		t.Errorf("bash exit: %v", errs)
	}
	// A new shell: the state of the old one is gone.
	if got := stdout(noError("after exit", sh("echo again ${kept:-none}; kept=8", nil))); got != "again none\n" {
		t.Errorf("bash after exit: %q", got)
	}
	if code, b := c.do("POST", "/execute", map[string]any{"code": "true", "language": "bash", "env_vars": map[string]string{"BAD NAME": "x"}}); code != 400 {
		t.Errorf("a bash env_vars name bash cannot export: %d %s", code, b)
	}

	// A bash cell past its timeout is interrupted; the shell stays.
	t0 := time.Now()
	ms = c.exec(map[string]any{"code": "sleep 60", "language": "bash", "timeout": 2})
	if errs := ofType(ms, "error"); len(errs) == 0 || errs[0]["name"] != "TimeoutError" || time.Since(t0) > 120*time.Second {
		t.Errorf("bash timeout: %v", ms)
	}
	if got := stdout(noError("after timeout", sh("echo $kept", nil))); got != "8\n" {
		t.Errorf("bash after a timeout: %q", got)
	}

	// Java has no packaged kernel: a 400 that says what is offered.
	if code, b := c.do("POST", "/execute", map[string]any{"code": "1", "language": "java"}); code != 400 || !strings.Contains(string(b), "bash") {
		t.Errorf("java: %d %s", code, b)
	}
	// A displayed figure's result has its chart beside its PNG (the
	// kinds themselves: internal/interp's TestChartExtraction).
	ms = noError("chart", c.exec(map[string]any{"code": "import matplotlib.pyplot as plt\n" +
		"plt.bar(['u', 'v'], [3, 5], label='n')\nplt.title('T')\nplt.show()"}))
	var chart map[string]any
	for _, r := range ofType(ms, "result") {
		if ch, ok := r["chart"].(map[string]any); ok && r["png"] != nil {
			chart = ch
		}
	}
	if chart == nil || chart["type"] != "bar" || chart["title"] != "T" || fmt.Sprint(chart["elements"]) != "[map[group:n label:u value:3] map[group:n label:v value:5]]" {
		t.Errorf("a bar chart's result: %v", ms)
	}

	code, b = c.do("GET", "/contexts", nil)
	if code != 200 || !strings.Contains(string(b), `"typescript"`) || !strings.Contains(string(b), `"r"`) || !strings.Contains(string(b), `"bash"`) {
		t.Errorf("contexts at the end: %s", b)
	}

	// BERTH_INTERP_DEFAULTS=python: only python's default context starts
	// with the server; javascript's at its first cell.
	lean, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "code-interpreter-v1",
		Env: map[string]string{"BERTH_INTERP_DEFAULTS": "python"}})
	if err != nil {
		t.Fatal(err)
	}
	lc := &interpClient{t: t, d: d, id: lean.ID, hc: hc, base: fmt.Sprintf("http://berth/v1/sandboxes/%s/ports/49999", lean.ID)}
	if code, b := lc.do("GET", "/contexts", nil); code != 200 || strings.Contains(string(b), "javascript") || !strings.Contains(string(b), `"python"`) {
		t.Errorf("contexts with BERTH_INTERP_DEFAULTS=python: %d %s", code, b)
	}
	if got := text(noError("lean js", lc.exec(map[string]any{"code": "1 + 2", "language": "js"}))); got != "3" {
		t.Errorf("js in the lean sandbox: %q", got)
	}
	if _, err := d.c.DeleteSandbox(ctx, lean.ID, true); err != nil {
		t.Fatal(err)
	}

	// A sandbox killed during a cell: the answer's head (200) is already
	// out, so the client sees its request cut, not refused (E2B's SDK
	// tells "the sandbox was killed" from that).
	req, err := http.NewRequest("POST", c.base+"/execute", strings.NewReader(`{"code": "import time; time.sleep(300)"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a long cell: %d", resp.StatusCode)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.Contains(line, "number_of_executions") {
		t.Fatalf("a long cell's first line: %q %v", line, err)
	}
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(resp.Body); err == nil || strings.Contains(string(rest), "end_of_execution") {
		t.Errorf("a killed sandbox's cell ended as if complete: %q %v", rest, err)
	}
}
