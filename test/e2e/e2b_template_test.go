package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/berth-sh/berth/client"
)

// TestE2BTemplateBuild drives E2B's template build API through the door
// with the unmodified e2b SDK (test/e2b/template.mjs): a template built
// from E2B's base image (berth's base) with copied files, commands as the
// default user and as root, env, workdir, user and a start command; its
// sandbox holds what the steps made and runs the start command as the
// template's service. A failing step is the SDK's BuildError with the
// step's reason; registry credentials are refused by name. Then the
// rights: a viewer key of the tenant cannot build, read a build's logs or
// ask for an upload link; another tenant's key finds neither the build
// nor the template; the build's calls are in the audit log, in the
// builder's tenant.
func TestE2BTemplateBuild(t *testing.T) {
	parallel(t)
	d, url, _ := e2bDaemon(t)
	do := e2bCaller(t, url)
	for _, tn := range []string{"acme", "other"} {
		if out, errOut, code := d.cli("tenant", "create", tn); code != 0 {
			t.Fatalf("tenant create: %s %s", out, errOut)
		}
	}
	member, viewer := roleKey(t, d, "acme", "member"), roleKey(t, d, "acme", "viewer")
	stranger := roleKey(t, d, "other", "member")

	var out struct {
		Build struct {
			Name, TemplateID string
			HasBuildID       bool
		}
		LogSawFile, Exists, Missing bool
		Status, Sandbox, Started    string
		Killed                      bool
		Fail, Registry              json.RawMessage
		OK                          bool
		Error                       string
	}
	runE2BScript(t, "template.mjs", url, member, &out, "TEMPLATE_NAME=e2b-built")
	if !out.OK {
		t.Fatalf("template.mjs: %+v", out)
	}
	if out.Build.Name != "e2b-built" || out.Build.TemplateID != "e2b-built" || !out.Build.HasBuildID {
		t.Errorf("build info: %+v", out.Build)
	}
	if !out.LogSawFile {
		t.Errorf("the build's logs did not carry the RUN step's output")
	}
	if !out.Exists || out.Missing || out.Status != "ready" {
		t.Errorf("exists %v, missing %v, status %q", out.Exists, out.Missing, out.Status)
	}
	// The default user's files, the workdir, the env as given ($ kept),
	// root's file, the copied directory with its mode, the symlink.
	if want := "user\n/srv\nhello \"world\" $HOME\nroot\nX = 42\n755\ntest.txt\n"; out.Sandbox != want {
		t.Errorf("the built template's sandbox: %q, want %q", out.Sandbox, want)
	}
	if out.Started != "started" || !out.Killed {
		t.Errorf("start command: %q, killed %v", out.Started, out.Killed)
	}
	if !strings.Contains(string(out.Fail), "BuildError") || !strings.Contains(string(out.Fail), "failed to run command 'echo before && exit 3': exit code 3") {
		t.Errorf("failing step: %s", out.Fail)
	}
	if !strings.Contains(string(out.Registry), "fromImageRegistry") {
		t.Errorf("registry credentials: %s", out.Registry)
	}
	if tpl, err := d.c.GetTemplate(context.Background(), "e2b-built"); err == nil {
		t.Errorf("the host sees the tenant's template: %+v", tpl)
	}

	// Rights. A build requested by the member, read by others.
	st, body := do("POST", "/v3/templates", `{"name":"e2b-rights","cpuCount":1,"memoryMB":1024}`, map[string]string{"X-API-Key": member})
	var req struct{ TemplateID, BuildID string }
	if st != 202 || json.Unmarshal([]byte(body), &req) != nil || req.BuildID == "" {
		t.Fatalf("request build: %d %s", st, body)
	}
	status := "/templates/" + req.TemplateID + "/builds/" + req.BuildID + "/status"
	files := "/templates/" + req.TemplateID + "/files/" + strings.Repeat("ab", 32)
	for _, c := range []struct {
		who, key, method, path, body string
		want                         int
	}{
		{"viewer", viewer, "POST", "/v3/templates", `{"name":"e2b-viewer"}`, 403},
		{"viewer", viewer, "GET", status, "", 403},
		{"viewer", viewer, "GET", files, "", 403},
		{"viewer", viewer, "POST", "/v2/templates/" + req.TemplateID + "/builds/" + req.BuildID, `{"fromTemplate":"base"}`, 403},
		{"stranger", stranger, "GET", status, "", 404},
		{"stranger", stranger, "GET", files, "", 404},
		{"stranger", stranger, "POST", "/v2/templates/" + req.TemplateID + "/builds/" + req.BuildID, `{"fromTemplate":"base"}`, 404},
		{"stranger", stranger, "GET", "/templates/aliases/e2b-built", "", 404},
		{"member", member, "POST", "/v3/templates", `{"name":"e2b-built"}`, 409},
		{"member", member, "POST", "/v3/templates", `{"name":"e2b-built:v2"}`, 400},
		{"member", member, "POST", "/v2/templates/" + req.TemplateID + "/builds/" + req.BuildID, `{"fromTemplate":"base","steps":[{"type":"ARG","args":["x"]}]}`, 400},
		{"member", member, "PUT", "/templates/uploads/" + strings.Repeat("0", 64), "x", 401},
	} {
		if st, body := do(c.method, c.path, c.body, map[string]string{"X-API-Key": c.key}); st != c.want {
			t.Errorf("%s %s %s: %d %s, want %d", c.who, c.method, c.path, st, body, c.want)
		}
	}
	if st, body := do("GET", status, "", map[string]string{"X-API-Key": member}); st != 200 || !strings.Contains(body, `"status":"waiting"`) {
		t.Errorf("the member's build status: %d %s", st, body)
	}

	entries, err := d.c.ListAudit(context.Background(), client.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, e := range entries {
		// The build's own calls succeeded; the refused ones after them
		// are recorded too.
		if strings.HasPrefix(e.Action, "e2b ") && strings.Contains(e.Action, "templates") && e.Tenant == "acme" && !strings.HasPrefix(seen[e.Action], "ok") {
			seen[e.Action] = e.Result
		}
	}
	for _, a := range []string{"e2b POST /v3/templates", "e2b PUT /templates/{templateID}/files/{hash}", "e2b POST /v2/templates/{templateID}/builds/{buildID}"} {
		if !strings.HasPrefix(seen[a], "ok") {
			t.Errorf("audit %q: %q (all %v)", a, seen[a], seen)
		}
	}
}
