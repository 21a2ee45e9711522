package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

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
		{"member", member, "POST", "/v3/templates", `{"name":"e2b-built:"}`, 400},
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

// TestE2BTemplateTags: E2B's tags through the door with the SDK
// (test/e2b/tags.mjs: name:tag builds, exists, assignTags, a tag moved,
// getTags, removeTags, sandboxes of each tag), the tags' rights, and a
// daemon restart: a finished build's status is still read, a build in
// progress at the crash ends as an error saying so, with its log so far.
func TestE2BTemplateTags(t *testing.T) {
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
		V1, V2                struct{ TemplateID, BuildID string }
		Exists                struct{ Tag, Name, OtherTag bool }
		V1Content, Production string
		Assigned              struct {
			SameBuild bool
			Tags      []string
		}
		Stable, Latest          string
		MovedSameBuild, DatesOK bool
		Tags                    []string
		RemovedGone             bool
		Refused                 map[string]bool
		OK                      bool
		Error                   string
	}
	runE2BScript(t, "tags.mjs", url, member, &out, "TEMPLATE_NAME=e2b-tagged")
	if !out.OK {
		t.Fatalf("tags.mjs: %+v", out)
	}
	if out.V1.TemplateID != "e2b-tagged" || out.V1.BuildID == "" {
		t.Errorf("the tagged build: %+v", out.V1)
	}
	if !out.Exists.Tag || !out.Exists.Name || out.Exists.OtherTag {
		t.Errorf("exists: %+v", out.Exists)
	}
	if out.V1Content != "v1" || out.Production != "v1" || out.Stable != "v2" || out.Latest != "v2" {
		t.Errorf("sandboxes of the tags: v1 %q, production %q, stable %q, latest %q", out.V1Content, out.Production, out.Stable, out.Latest)
	}
	if !out.Assigned.SameBuild || strings.Join(out.Assigned.Tags, ",") != "production,latest" || !out.MovedSameBuild {
		t.Errorf("assignTags: %+v, moved to v2's build %v", out.Assigned, out.MovedSameBuild)
	}
	if got := strings.Join(out.Tags, " "); got != "latest=v2 stable=v2 v1=v1 v2=v2" || !out.DatesOK {
		t.Errorf("getTags: %s (dates %v)", got, out.DatesOK)
	}
	if !out.RemovedGone {
		t.Errorf("a sandbox of a removed tag was made")
	}
	for k, v := range out.Refused {
		if !v {
			t.Errorf("not refused: %s", k)
		}
	}
	if len(out.Refused) != 5 {
		t.Errorf("refusals: %v", out.Refused)
	}
	// The tags are berth templates of the tenant, name.tag.
	if tpl, err := d.c.GetTemplate(context.Background(), "e2b-tagged.v1"); err == nil {
		t.Errorf("the host sees the tenant's tag template: %+v", tpl)
	}

	// Rights: the viewer may not tag, another tenant sees nothing.
	assign := `{"target":"e2b-tagged:v1","tags":["x"]}`
	remove := `{"name":"e2b-tagged","tags":["v1"]}`
	for _, c := range []struct {
		who, key, method, path, body string
		want                         int
	}{
		{"viewer", viewer, "POST", "/templates/tags", assign, 403},
		{"viewer", viewer, "DELETE", "/templates/tags", remove, 403},
		{"viewer", viewer, "GET", "/templates/e2b-tagged/tags", "", 200},
		{"stranger", stranger, "POST", "/templates/tags", assign, 404},
		{"stranger", stranger, "DELETE", "/templates/tags", remove, 404},
		{"stranger", stranger, "GET", "/templates/e2b-tagged/tags", "", 404},
		{"stranger", stranger, "GET", "/templates/aliases/e2b-tagged:v1", "", 404},
		{"stranger", stranger, "GET", "/templates/e2b-tagged/builds/" + out.V1.BuildID + "/status", "", 404},
		{"stranger", stranger, "POST", "/v2/sandboxes", `{"templateID":"e2b-tagged:v1"}`, 404},
		{"member", member, "POST", "/templates/tags", `{"target":"base","tags":["mine"]}`, 404},
		{"member", member, "POST", "/templates/tags", `{"target":"e2b-tagged:v1","tags":["a b"]}`, 400},
		{"member", member, "POST", "/v3/templates", `{"name":"my.app:v1"}`, 400},
		{"member", member, "GET", "/templates/e2b-tagged/nope", "", 404},
	} {
		if st, body := do(c.method, c.path, c.body, map[string]string{"X-API-Key": c.key}); st != c.want {
			t.Errorf("%s %s %s: %d %s, want %d", c.who, c.method, c.path, st, body, c.want)
		}
	}

	// A build in progress when the daemon dies.
	st, body := do("POST", "/v3/templates", `{"name":"e2b-slow:v1"}`, map[string]string{"X-API-Key": member})
	var req struct{ TemplateID, BuildID string }
	if st != 202 || json.Unmarshal([]byte(body), &req) != nil || req.TemplateID != "e2b-slow" {
		t.Fatalf("request build: %d %s", st, body)
	}
	slow := "/templates/" + req.TemplateID + "/builds/" + req.BuildID + "/status"
	if st, body := do("POST", "/v2/templates/"+req.TemplateID+"/builds/"+req.BuildID,
		`{"fromTemplate":"base","steps":[{"type":"RUN","args":["echo step-two-began"]},{"type":"RUN","args":["echo sleeping && sleep 600"]}]}`,
		map[string]string{"X-API-Key": member}); st != 202 {
		t.Fatalf("start build: %d %s", st, body)
	}
	// Wait until the second step runs (its step change wrote the record).
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		_, body := do("GET", slow, "", map[string]string{"X-API-Key": member})
		if strings.Contains(body, "sleeping") {
			break
		}
		if time.Now().After(deadline) || strings.Contains(body, `"status":"error"`) {
			t.Fatalf("the slow build's second step did not run: %s", body)
		}
	}
	d.kill()
	d.start()
	st, body = do("GET", slow, "", map[string]string{"X-API-Key": member})
	var info struct {
		Status string
		Reason struct{ Message string }
		Logs   []string
	}
	if st != 200 || json.Unmarshal([]byte(body), &info) != nil {
		t.Fatalf("the interrupted build's status after the restart: %d %s", st, body)
	}
	if info.Status != "error" || !strings.Contains(info.Reason.Message, "interrupted") || !strings.Contains(strings.Join(info.Logs, ""), "step-two-began") {
		t.Errorf("the interrupted build: %s", body)
	}
	st, body = do("GET", "/templates/e2b-tagged/builds/"+out.V2.BuildID+"/status", "", map[string]string{"X-API-Key": member})
	if st != 200 || !strings.Contains(body, `"status":"ready"`) {
		t.Errorf("a finished build's status after the restart: %d %s", st, body)
	}
	if st, body := do("GET", slow, "", map[string]string{"X-API-Key": stranger}); st != 404 {
		t.Errorf("another tenant reads the restored build: %d %s", st, body)
	}
}
