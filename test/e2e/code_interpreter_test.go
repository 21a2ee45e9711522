package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// The code-interpreter template (#16 item 4): E2B's code-interpreter wire
// on port 49999, reached through berth's port proxy, on both classes.
func TestCodeInterpreterRunc(t *testing.T) {
	parallel(t)
	codeInterpreterScenario(t, startDaemon(t), "")
}
func TestCodeInterpreterRunsc(t *testing.T) {
	parallel(t)
	codeInterpreterScenario(t, startRunscDaemon(t), "runsc")
}

type interpClient struct {
	t    *testing.T
	d    *daemon
	id   string
	hc   *http.Client
	base string
}

func (c *interpClient) do(method, path string, body any) (int, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Logf("%s %s: reading the answer: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// exec runs code and returns the NDJSON messages of its answer.
func (c *interpClient) exec(req map[string]any) []map[string]any {
	c.t.Helper()
	code, b := c.do("POST", "/execute", req)
	if code != 200 {
		c.t.Fatalf("execute %v: %d %s", req, code, b)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			c.t.Fatalf("execute %v: line %q: %v", req, sc.Text(), err)
		}
		out = append(out, m)
	}
	if len(out) == 0 || out[len(out)-1]["type"] != "end_of_execution" {
		out, _, _ := c.d.cli("logs", c.id, "service")
		c.t.Fatalf("execute %v: no end_of_execution: %s\nthe service's output:\n%s", req, b, out)
	}
	return out
}

func ofType(ms []map[string]any, typ string) []map[string]any {
	var out []map[string]any
	for _, m := range ms {
		if m["type"] == typ {
			out = append(out, m)
		}
	}
	return out
}

func mainText(t *testing.T, ms []map[string]any) string {
	t.Helper()
	for _, m := range ofType(ms, "result") {
		if m["is_main_result"] == true {
			s, _ := m["text"].(string)
			return s
		}
	}
	t.Fatalf("no main result in %v", ms)
	return ""
}

func codeInterpreterScenario(t *testing.T, d *daemon, runtime string) {
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "code-interpreter-v1", Runtime: runtime})
	if err != nil {
		t.Fatal(err)
	}
	hc := unixHTTP(d)
	hc.Timeout = 90 * time.Second
	c := &interpClient{t: t, d: d, id: sb.ID, hc: hc, base: fmt.Sprintf("http://berth/v1/sandboxes/%s/ports/49999", sb.ID)}
	// Create returned once the service listened (its ready port): the
	// first request is answered, not refused.
	if code, b := c.do("GET", "/health", nil); code != 200 || strings.TrimSpace(string(b)) != `"OK"` {
		t.Fatalf("/health right after create: %d %s", code, b)
	}

	// State lasts within the default context.
	c.exec(map[string]any{"code": "x = 1"})
	if got := mainText(t, c.exec(map[string]any{"code": "x + 1"})); got != "2" {
		t.Fatalf("x + 1 = %q, want 2", got)
	}
	// stdout is streamed as its own message.
	if out := ofType(c.exec(map[string]any{"code": "print('hi')"}), "stdout"); len(out) != 1 || out[0]["text"] != "hi\n" {
		t.Fatalf("stdout: %v", out)
	}

	// A matplotlib figure becomes a result with a PNG.
	ms := c.exec(map[string]any{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.show()"})
	var png []byte
	for _, r := range ofType(ms, "result") {
		if s, ok := r["png"].(string); ok {
			if png, err = base64.StdEncoding.DecodeString(s); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("plot: no PNG result in %v", ms)
	}

	// A pandas frame: html and text.
	ms = c.exec(map[string]any{"code": "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['u', 'v']})"})
	var frame map[string]any
	for _, r := range ofType(ms, "result") {
		if r["is_main_result"] == true {
			frame = r
		}
	}
	if html, _ := frame["html"].(string); !strings.Contains(html, "<table") {
		t.Fatalf("frame html: %v", frame)
	}
	if text, _ := frame["text"].(string); !strings.Contains(text, "a") || !strings.Contains(text, "u") {
		t.Fatalf("frame text: %v", frame)
	}

	// An exception: name, value, traceback.
	errs := ofType(c.exec(map[string]any{"code": "1/0"}), "error")
	if len(errs) != 1 || errs[0]["name"] != "ZeroDivisionError" || !strings.Contains(errs[0]["traceback"].(string), "ZeroDivisionError") {
		t.Fatalf("1/0: %v", errs)
	}

	// A timeout interrupts the kernel, which stays usable with its state.
	t0 := time.Now()
	errs = ofType(c.exec(map[string]any{"code": "import time\ntime.sleep(60)", "timeout": 2}), "error")
	if took := time.Since(t0); len(errs) != 1 || errs[0]["name"] != "TimeoutError" || took > 20*time.Second {
		t.Fatalf("sleep with a 2 s timeout: %v after %v", errs, took)
	}
	if got := mainText(t, c.exec(map[string]any{"code": "x + 2"})); got != "3" {
		t.Fatalf("after the timeout x + 2 = %q, want 3", got)
	}

	// A second context does not see the first's variables.
	code, b := c.do("POST", "/contexts", map[string]any{"language": "python", "cwd": "/tmp"})
	var cx struct{ ID, Language, Cwd string }
	if code != 200 || json.Unmarshal(b, &cx) != nil || cx.ID == "" || cx.Language != "python" || cx.Cwd != "/tmp" {
		t.Fatalf("create context: %d %s", code, b)
	}
	errs = ofType(c.exec(map[string]any{"code": "x", "context_id": cx.ID}), "error")
	if len(errs) != 1 || errs[0]["name"] != "NameError" {
		t.Fatalf("x in a new context: %v", errs)
	}
	if got := mainText(t, c.exec(map[string]any{"code": "import os; y = 5; os.getcwd()", "context_id": cx.ID})); got != "/tmp" {
		t.Fatalf("cwd of the new context: %q", got)
	}
	code, b = c.do("GET", "/contexts", nil)
	if code != 200 || !strings.Contains(string(b), cx.ID) {
		t.Fatalf("list contexts: %d %s", code, b)
	}
	// Restart clears its state.
	if code, b := c.do("POST", "/contexts/"+cx.ID+"/restart", nil); code != 204 {
		t.Fatalf("restart: %d %s", code, b)
	}
	errs = ofType(c.exec(map[string]any{"code": "y", "context_id": cx.ID}), "error")
	if len(errs) != 1 || errs[0]["name"] != "NameError" {
		t.Fatalf("y after restart: %v", errs)
	}
	if code, b := c.do("DELETE", "/contexts/"+cx.ID, nil); code != 204 {
		t.Fatalf("delete context: %d %s", code, b)
	}
	if code, _ := c.do("POST", "/execute", map[string]any{"code": "1", "context_id": cx.ID}); code != 404 {
		t.Fatalf("execute in a deleted context: %d, want 404", code)
	}
	// Bad input is a 400, and the server answers after it.
	for _, bad := range []map[string]any{{}, {"code": 1}, {"code": "1", "language": "cobol"}, {"code": "1", "timeout": -1}, {"code": "1", "env_vars": []int{1}}} {
		if code, b := c.do("POST", "/execute", bad); code != 400 {
			t.Fatalf("bad execute %v: %d %s", bad, code, b)
		}
	}
	// env_vars hold for one execution.
	if got := mainText(t, c.exec(map[string]any{"code": "import os; os.environ.get('BERTH_T')", "env_vars": map[string]string{"BERTH_T": "v1"}})); got != "v1" {
		t.Fatalf("env var: %q", got)
	}
	if got := mainText(t, c.exec(map[string]any{"code": "repr(os.environ.get('BERTH_T'))"})); got != `None` {
		t.Fatalf("env var after its execution: %q", got)
	}
}
