package catalogue

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/selftest/attack"
)

// The E2B door (serve --e2b-listen) holds the same rights as the REST
// API: a viewer key never receives a sandbox's envd access token (which
// runs commands and writes files), the token a key is shown ends with
// that key (and so does a stream opened with it), envd's health check is no oracle of which sandbox ids exist,
// and envd's process start refuses what REST's refuses. They run once (runc): the door's rules do not depend on the
// runtime.
func e2bAttacks() []*attack.Attack {
	x := func(id, desc, expected string, run func(ctx ctxT, e *attack.Env, door *e2bDoor) attack.Outcome) *attack.Attack {
		return &attack.Attack{ID: "api.e2b-" + id, Category: attack.CatAPI, Description: desc, Expected: expected,
			Classes: []string{attack.Runc},
			Run: func(ctx ctxT, e *attack.Env) attack.Outcome {
				if e.Target.E2B == "" {
					return attack.NotApplicable("needs the daemon's E2B door (--private starts one)")
				}
				door, err := newE2BDoor(ctx, e)
				if err != nil {
					return attack.Escaped("%v", err)
				}
				defer door.cleanup(context.WithoutCancel(ctx))
				return run(ctx, e, door)
			}}
	}
	return []*attack.Attack{
		x("viewer-envd-token", "read a sandbox through the E2B door with a viewer key, to take its envd access token (commands as root, files)", "no envdAccessToken",
			func(ctx ctxT, e *attack.Env, door *e2bDoor) attack.Outcome {
				st, body, err := door.do(ctx, "GET", "/sandboxes/"+door.sandbox, door.viewer, nil, "")
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				leaked := strings.Contains(body, "envdAccessToken") || strings.Contains(body, door.token)
				return attack.Judged(st == 200 && !leaked, "GET /sandboxes/A as a viewer: %d, token shown %v", st, leaked)
			}),
		x("health-oracle", "probe envd's /health without a token for a live sandbox and for an id that names nothing", "the same answer (502) for both",
			func(ctx ctxT, e *attack.Env, door *e2bDoor) attack.Outcome {
				var got []int
				for _, id := range []string{door.sandbox, "sb-" + strings.Repeat("0", max(len(door.sandbox)-3, 1))} {
					st, _, err := door.do(ctx, "GET", "/health", "", map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983"}, "")
					if err != nil {
						return attack.Escaped("request: %v", err)
					}
					got = append(got, st)
				}
				return attack.Judged(got[0] == got[1] && got[0] == 502, "live sandbox %d, unknown id %d", got[0], got[1])
			}),
		x("revoked-reader-token", "read a sandbox through the E2B door with a second member key (not its creator), revoke that key, then run a command with the envd token it was shown", "the token ends with the key: unauthenticated",
			func(ctx ctxT, e *attack.Env, door *e2bDoor) attack.Outcome {
				k, err := e.C.CreateAPIKey(ctx, api.CreateAPIKeyRequest{Name: door.tenant + "-reader", Tenant: door.tenant, Role: "member"})
				if err != nil {
					return attack.Escaped("a second member key: %v", err)
				}
				st, body, err := door.do(ctx, "GET", "/sandboxes/"+door.sandbox, k.Key, nil, "")
				var out struct{ EnvdAccessToken string }
				if err != nil || st != 200 || json.Unmarshal([]byte(body), &out) != nil || out.EnvdAccessToken == "" {
					return attack.Escaped("the reader's get: %d %v %s", st, err, attack.Clip(attack.OneLine(body), 80))
				}
				if _, err := e.C.RevokeAPIKey(ctx, k.ID); err != nil {
					return attack.Escaped("revoking the reader: %v", err)
				}
				st, body, err = door.do(ctx, "POST", "/process.Process/Start", "", map[string]string{"E2b-Sandbox-Id": door.sandbox,
					"E2b-Sandbox-Port": "49983", "X-Access-Token": out.EnvdAccessToken, "Content-Type": "application/connect+json"},
					connectEnvelope(`{"process":{"cmd":"/bin/true"}}`))
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				return attack.Judged(strings.Contains(body, "unauthenticated"), "a command with the revoked reader's token: %d %s",
					st, attack.Clip(attack.OneLine(body), 80))
			}),
		x("revoked-stream", "open a process stream through envd with the envd token of a second member key's sandbox, revoke that key, and keep reading the stream", "the stream ends within 5 s of the revocation",
			func(ctx ctxT, e *attack.Env, door *e2bDoor) attack.Outcome {
				k, err := e.C.CreateAPIKey(ctx, api.CreateAPIKeyRequest{Name: door.tenant + "-streamer", Tenant: door.tenant, Role: "member"})
				if err != nil {
					return attack.Escaped("a second member key: %v", err)
				}
				st, body, err := door.do(ctx, "GET", "/sandboxes/"+door.sandbox, k.Key, nil, "")
				var out struct{ EnvdAccessToken string }
				if err != nil || st != 200 || json.Unmarshal([]byte(body), &out) != nil || out.EnvdAccessToken == "" {
					return attack.Escaped("the streamer's get: %d %v %s", st, err, attack.Clip(attack.OneLine(body), 80))
				}
				sctx, cancel := context.WithCancel(ctx)
				defer cancel()
				req, err := http.NewRequestWithContext(sctx, "POST", e.Target.E2B+"/process.Process/Start",
					strings.NewReader(connectEnvelope(`{"process":{"cmd":"/bin/sleep","args":["600"]}}`)))
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				req.Header = http.Header{"E2b-Sandbox-Id": {door.sandbox}, "E2b-Sandbox-Port": {"49983"},
					"X-Access-Token": {out.EnvdAccessToken}, "Content-Type": {"application/connect+json"}}
				resp, err := (&http.Client{}).Do(req)
				if err != nil {
					return attack.Escaped("the stream: %v", err)
				}
				defer resp.Body.Close()
				var hdr [5]byte // the start event: the stream is open
				if _, err := io.ReadFull(resp.Body, hdr[:]); err != nil || resp.StatusCode != 200 {
					return attack.Escaped("the stream did not open: %d %v", resp.StatusCode, err)
				}
				if _, err := e.C.RevokeAPIKey(ctx, k.ID); err != nil {
					return attack.Escaped("revoking the streamer: %v", err)
				}
				ended := make(chan string, 1)
				go func() {
					b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
					ended <- string(b)
				}()
				select {
				case tail := <-ended:
					return attack.Judged(strings.Contains(tail, "unauthenticated"), "the stream ended after the revocation: %s",
						attack.Clip(attack.OneLine(tail), 80))
				case <-time.After(5 * time.Second):
					return attack.Escaped("the stream outlived its key's revocation by 5 s")
				}
			}),
		x("template-build-rights", "request an E2B template build with a member key, then with a viewer key of its tenant and a member key of another tenant try to build, read the build's status and logs, ask for an upload link of its files and start it", "403 for the viewer, 404 for the other tenant; the build still waits, untouched",
			func(ctx ctxT, e *attack.Env, door *e2bDoor) attack.Outcome {
				st, body, err := door.do(ctx, "POST", "/v3/templates", door.member, nil, `{"name":"selftest-e2b-tpl-`+e.Tag+`"}`)
				var req struct{ TemplateID, BuildID string }
				if err != nil || st != 202 || json.Unmarshal([]byte(body), &req) != nil || req.BuildID == "" {
					return attack.Escaped("the member's build request: %d %v %s", st, err, attack.Clip(attack.OneLine(body), 80))
				}
				otherTenant := door.tenant + "-other"
				if _, err := e.C.CreateTenant(ctx, otherTenant); err != nil {
					return attack.Escaped("another tenant: %v", err)
				}
				defer e.C.DeleteTenant(context.WithoutCancel(ctx), otherTenant)
				k, err := e.C.CreateAPIKey(ctx, api.CreateAPIKeyRequest{Name: otherTenant + "-member", Tenant: otherTenant, Role: "member"})
				if err != nil {
					return attack.Escaped("the other tenant's key: %v", err)
				}
				build := "/templates/" + req.TemplateID + "/builds/" + req.BuildID
				var bad []string
				for _, c := range []struct {
					who, key, method, path, body string
					want                         int
				}{
					{"viewer", door.viewer, "POST", "/v3/templates", `{"name":"selftest-e2b-viewer"}`, 403},
					{"viewer", door.viewer, "GET", build + "/status", "", 403},
					{"viewer", door.viewer, "GET", "/templates/" + req.TemplateID + "/files/" + strings.Repeat("ab", 32), "", 403},
					{"viewer", door.viewer, "POST", "/v2" + build, `{"fromTemplate":"base","steps":[{"type":"RUN","args":["id"]}]}`, 403},
					{"other tenant", k.Key, "GET", build + "/status", "", 404},
					{"other tenant", k.Key, "GET", "/templates/" + req.TemplateID + "/files/" + strings.Repeat("ab", 32), "", 404},
					{"other tenant", k.Key, "POST", "/v2" + build, `{"fromTemplate":"base","steps":[{"type":"RUN","args":["id"]}]}`, 404},
				} {
					st, body, err := door.do(ctx, c.method, c.path, c.key, nil, c.body)
					if err != nil {
						return attack.Escaped("request: %v", err)
					}
					if st != c.want {
						bad = append(bad, fmt.Sprintf("%s %s %s: %d %s", c.who, c.method, c.path, st, attack.Clip(attack.OneLine(body), 60)))
					}
				}
				st, body, err = door.do(ctx, "GET", build+"/status", door.member, nil, "")
				if err != nil || st != 200 || !strings.Contains(body, `"status":"waiting"`) {
					bad = append(bad, fmt.Sprintf("the member's build after: %d %v %s", st, err, attack.Clip(attack.OneLine(body), 60)))
				}
				if len(bad) > 0 {
					return attack.Escaped("%d of 7 refused as expected; %s", 7-len(bad), strings.Join(bad, "; "))
				}
				return attack.Contained("7 of 7 refused as expected, the build untouched")
			}),
		x("template-tag-rights", "build an E2B template with a member key, then with a viewer key of its tenant and a member key of another tenant try to give it tags, remove its tag and list its tags; and tag the host's shared base template as the member", "403 for the viewer, 404 for the other tenant and for the shared template; the template keeps its one tag",
			func(ctx ctxT, e *attack.Env, door *e2bDoor) attack.Outcome {
				name := "selftest-e2b-tags-" + e.Tag
				st, body, err := door.do(ctx, "POST", "/v3/templates", door.member, nil, `{"name":"`+name+`"}`)
				var req struct{ TemplateID, BuildID string }
				if err != nil || st != 202 || json.Unmarshal([]byte(body), &req) != nil || req.BuildID == "" {
					return attack.Escaped("the member's build request: %d %v %s", st, err, attack.Clip(attack.OneLine(body), 80))
				}
				build := "/templates/" + req.TemplateID + "/builds/" + req.BuildID
				if st, body, err := door.do(ctx, "POST", "/v2"+build, door.member, nil, `{"fromTemplate":"base"}`); err != nil || st != 202 {
					return attack.Escaped("starting the member's build: %d %v %s", st, err, attack.Clip(attack.OneLine(body), 80))
				}
				defer door.do(context.WithoutCancel(ctx), "DELETE", "/templates/tags", door.member, nil, `{"name":"`+name+`","tags":["default"]}`)
				for i := 0; ; i++ {
					st, body, err := door.do(ctx, "GET", build+"/status", door.member, nil, "")
					if err == nil && st == 200 && strings.Contains(body, `"status":"ready"`) {
						break
					}
					if err != nil || st != 200 || strings.Contains(body, `"status":"error"`) || i >= 600 {
						return attack.Escaped("the member's build: %d %v %s", st, err, attack.Clip(attack.OneLine(body), 120))
					}
					time.Sleep(200 * time.Millisecond)
				}
				otherTenant := door.tenant + "-other"
				if _, err := e.C.CreateTenant(ctx, otherTenant); err != nil {
					return attack.Escaped("another tenant: %v", err)
				}
				defer e.C.DeleteTenant(context.WithoutCancel(ctx), otherTenant)
				k, err := e.C.CreateAPIKey(ctx, api.CreateAPIKeyRequest{Name: otherTenant + "-member", Tenant: otherTenant, Role: "member"})
				if err != nil {
					return attack.Escaped("the other tenant's key: %v", err)
				}
				assign := `{"target":"` + name + `","tags":["stolen"]}`
				remove := `{"name":"` + name + `","tags":["default"]}`
				var bad []string
				for _, c := range []struct {
					who, key, method, path, body string
					want                         int
				}{
					{"viewer", door.viewer, "POST", "/templates/tags", assign, 403},
					{"viewer", door.viewer, "DELETE", "/templates/tags", remove, 403},
					{"other tenant", k.Key, "POST", "/templates/tags", assign, 404},
					{"other tenant", k.Key, "DELETE", "/templates/tags", remove, 404},
					{"other tenant", k.Key, "GET", "/templates/" + name + "/tags", "", 404},
					{"other tenant", k.Key, "GET", "/templates/aliases/" + name, "", 404},
					{"member", door.member, "POST", "/templates/tags", `{"target":"base","tags":["mine"]}`, 404},
				} {
					st, body, err := door.do(ctx, c.method, c.path, c.key, nil, c.body)
					if err != nil {
						return attack.Escaped("request: %v", err)
					}
					if st != c.want {
						bad = append(bad, fmt.Sprintf("%s %s %s: %d %s", c.who, c.method, c.path, st, attack.Clip(attack.OneLine(body), 60)))
					}
				}
				st, body, err = door.do(ctx, "GET", "/templates/"+name+"/tags", door.member, nil, "")
				var tags []struct{ Tag string }
				if err != nil || st != 200 || json.Unmarshal([]byte(body), &tags) != nil || len(tags) != 1 || tags[0].Tag != "default" {
					bad = append(bad, fmt.Sprintf("the member's tags after: %d %v %s", st, err, attack.Clip(attack.OneLine(body), 80)))
				}
				if st, _, err := door.do(ctx, "GET", "/templates/aliases/base.mine", door.member, nil, ""); err != nil || st != 404 {
					bad = append(bad, fmt.Sprintf("a tag of the shared base was made: %d %v", st, err))
				}
				if len(bad) > 0 {
					return attack.Escaped("%d of 7 refused as expected; %s", 7-len(bad), strings.Join(bad, "; "))
				}
				return attack.Contained("7 of 7 refused as expected, the template keeps its one tag")
			}),
		x("envd-control-bytes", "start a process through envd with an ESC in an env name and in the working directory", "invalid_argument, as REST refuses them",
			func(ctx ctxT, e *attack.Env, door *e2bDoor) attack.Outcome {
				var seen []string
				for _, p := range []string{`{"cmd":"/bin/true","envs":{"A\u001bB":"1"}}`, `{"cmd":"/bin/true","cwd":"/tmp/\u001b[31m"}`} {
					st, body, err := door.do(ctx, "POST", "/process.Process/Start", "", map[string]string{"E2b-Sandbox-Id": door.sandbox,
						"E2b-Sandbox-Port": "49983", "X-Access-Token": door.token, "Content-Type": "application/connect+json"},
						connectEnvelope(`{"process":`+p+`}`))
					if err != nil {
						return attack.Escaped("request: %v", err)
					}
					if !strings.Contains(body, "invalid_argument") {
						return attack.Escaped("start %s: %d %s", p, st, attack.Clip(attack.OneLine(body), 80))
					}
					seen = append(seen, "invalid_argument")
				}
				return attack.Contained("env name, cwd: %s", strings.Join(seen, ", "))
			}),
		x("control-bad-input", "through the E2B control API with a member key, create from a template named with an ESC, snapshot a sandbox under a name with one, put an egress rule with one, ask for 65 children of a fork; and send envd a process start whose message does not decode", "400 (invalid_argument for envd) for each, as REST refuses them, nothing made",
			func(ctx ctxT, e *attack.Env, door *e2bDoor) attack.Outcome {
				var bad []string
				for _, c := range []struct{ method, path, body string }{
					{"POST", "/sandboxes", `{"templateID":"a\u001bb"}`},
					{"POST", "/sandboxes/" + door.sandbox + "/snapshots", `{"name":"a\u001bb"}`},
					{"PUT", "/sandboxes/" + door.sandbox + "/network", `{"allowOut":["a\u001bb"]}`},
					{"POST", "/sandboxes/" + door.sandbox + "/fork", `{"count":65}`},
				} {
					st, body, err := door.do(ctx, c.method, c.path, door.member, nil, c.body)
					if err != nil {
						return attack.Escaped("request: %v", err)
					}
					if st != 400 {
						bad = append(bad, fmt.Sprintf("%s %s: %d %s", c.method, c.path, st, attack.Clip(attack.OneLine(body), 60)))
					}
				}
				st, body, err := door.do(ctx, "POST", "/process.Process/Start", "", map[string]string{"E2b-Sandbox-Id": door.sandbox,
					"E2b-Sandbox-Port": "49983", "X-Access-Token": door.token, "Content-Type": "application/connect+json"},
					connectEnvelope(`{"process":{"cmd":5}}`))
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				if !strings.Contains(body, "invalid_argument") {
					bad = append(bad, fmt.Sprintf("envd start: %d %s", st, attack.Clip(attack.OneLine(body), 60)))
				}
				if len(bad) > 0 {
					return attack.Escaped("%s", strings.Join(bad, "; "))
				}
				return attack.Contained("create, snapshot, network, fork: 400; envd: invalid_argument")
			}),
		x("envd-long-path", "write a file through envd, and start a process there, naming a path past PATH_MAX (4097 bytes)", "400 and invalid_argument, as REST refuses it",
			func(ctx ctxT, e *attack.Env, door *e2bDoor) attack.Outcome {
				long := "/tmp/" + strings.Repeat("a", 4092)
				hdr := map[string]string{"E2b-Sandbox-Id": door.sandbox, "E2b-Sandbox-Port": "49983", "X-Access-Token": door.token}
				up := map[string]string{"Content-Type": "application/octet-stream"}
				for k, v := range hdr {
					up[k] = v
				}
				st, body, err := door.do(ctx, "POST", "/files?path="+long, "", up, "x")
				if err != nil {
					return attack.Escaped("upload: %v", err)
				}
				if st != 400 {
					return attack.Escaped("upload to a path past PATH_MAX: %d %s", st, attack.Clip(attack.OneLine(body), 80))
				}
				hdr["Content-Type"] = "application/connect+json"
				st, body, err = door.do(ctx, "POST", "/process.Process/Start", "", hdr,
					connectEnvelope(`{"process":{"cmd":"/bin/true","cwd":"`+long+`"}}`))
				if err != nil {
					return attack.Escaped("start: %v", err)
				}
				if !strings.Contains(body, "invalid_argument") {
					return attack.Escaped("start in a cwd past PATH_MAX: %d %s", st, attack.Clip(attack.OneLine(body), 80))
				}
				return attack.Contained("upload 400, start invalid_argument")
			}),
		x("network-widen", "widen a sandbox's egress rules through the E2B door's updateNetwork (PUT /sandboxes/A/network, denyOut nothing) with a viewer key, and with the sandbox's envd token", "403 for both (the token is a lease: no control API); the rules unchanged",
			func(ctx ctxT, e *attack.Env, door *e2bDoor) attack.Outcome {
				before, err := e.C.Network(ctx, door.sandbox)
				if err != nil {
					return attack.Escaped("the rules before: %v", err)
				}
				var seen []string
				for _, who := range []struct{ what, key string }{{"viewer", door.viewer}, {"envd token", door.token}} {
					st, body, err := door.do(ctx, "PUT", "/sandboxes/"+door.sandbox+"/network", who.key, nil, `{}`)
					if err != nil {
						return attack.Escaped("request: %v", err)
					}
					if st != 403 && st != 401 {
						return attack.Escaped("updateNetwork as the %s: %d %s", who.what, st, attack.Clip(attack.OneLine(body), 80))
					}
					seen = append(seen, fmt.Sprintf("%s %d", who.what, st))
				}
				after, err := e.C.Network(ctx, door.sandbox)
				if err != nil {
					return attack.Escaped("the rules after: %v", err)
				}
				if after.Mode != before.Mode || strings.Join(after.Allow, ",") != strings.Join(before.Allow, ",") {
					return attack.Escaped("the rules changed: %s %v -> %s %v", before.Mode, before.Allow, after.Mode, after.Allow)
				}
				return attack.Contained("%s; rules unchanged", strings.Join(seen, ", "))
			}),
		x("signed-url-misuse", "download a file through a signed file URL (the SDK's downloadUrl) with a forged signature, an expired one, one signed for another path, another sandbox's, a read signature used to upload, and one of a second key's token after that key is revoked", "each 401, while the sandbox's own signatures read the file",
			func(ctx ctxT, e *attack.Env, door *e2bDoor) attack.Outcome {
				envd := func(id, tok string) map[string]string {
					h := map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983"}
					if tok != "" {
						h["X-Access-Token"] = tok
					}
					return h
				}
				up := envd(door.sandbox, door.token)
				up["Content-Type"] = "application/octet-stream"
				if st, body, err := door.do(ctx, "POST", "/files?path=/tmp/signed.txt&username=root", "", up, "secret"); err != nil || st != 200 {
					return attack.Escaped("writing the file: %d %v %s", st, err, attack.Clip(attack.OneLine(body), 80))
				}
				// A second sandbox of the same tenant, to sign with.
				st, body, err := door.do(ctx, "POST", "/v2/sandboxes", door.member, nil, `{"templateID":"base","timeout":300,"metadata":{"berth-selftest":"`+e.Tag+`"}}`)
				var other struct{ SandboxID, EnvdAccessToken string }
				if err != nil || st != 201 || json.Unmarshal([]byte(body), &other) != nil || other.EnvdAccessToken == "" {
					return attack.Escaped("a second sandbox: %d %v %s", st, err, attack.Clip(attack.OneLine(body), 80))
				}
				defer e.Delete(context.WithoutCancel(ctx), other.SandboxID)
				exp := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
				past := strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10)
				url := func(path, sig, exp string) string {
					return "/files?path=" + path + "&username=root&signature=" + neturl.QueryEscape(sig) + "&signature_expiration=" + exp
				}
				tries := []struct{ what, method, url, sandbox string }{
					{"forged", "GET", url("/tmp/signed.txt", e2bSign("/tmp/signed.txt", "read", "root", "berth_lease_forged", exp), exp), door.sandbox},
					{"expired", "GET", url("/tmp/signed.txt", e2bSign("/tmp/signed.txt", "read", "root", door.token, past), past), door.sandbox},
					{"other path", "GET", url("/etc/shadow", e2bSign("/tmp/signed.txt", "read", "root", door.token, exp), exp), door.sandbox},
					{"other sandbox's", "GET", url("/tmp/signed.txt", e2bSign("/tmp/signed.txt", "read", "root", other.EnvdAccessToken, exp), exp), door.sandbox},
					{"read as write", "POST", url("/tmp/signed.txt", e2bSign("/tmp/signed.txt", "read", "root", door.token, exp), exp), door.sandbox},
				}
				var seen []string
				for _, t := range tries {
					st, body, err := door.do(ctx, t.method, t.url, "", envd(t.sandbox, ""), "")
					if err != nil {
						return attack.Escaped("%s: %v", t.what, err)
					}
					if st != 401 || strings.Contains(body, "secret") {
						return attack.Escaped("%s signature: %d %s", t.what, st, attack.Clip(attack.OneLine(body), 80))
					}
					seen = append(seen, t.what+" 401")
				}
				st, body, err = door.do(ctx, "GET", url("/tmp/signed.txt", e2bSign("/tmp/signed.txt", "read", "root", door.token, exp), exp), "", envd(door.sandbox, ""), "")
				if err != nil || st != 200 || body != "secret" {
					return attack.Escaped("the sandbox's own signature did not read the file (the refusals prove nothing): %d %v %s", st, err, attack.Clip(attack.OneLine(body), 80))
				}
				// A second member key's token signs too, until that key
				// is revoked.
				k, err := e.C.CreateAPIKey(ctx, api.CreateAPIKeyRequest{Name: door.tenant + "-signer", Tenant: door.tenant, Role: "member"})
				if err != nil {
					return attack.Escaped("a second member key: %v", err)
				}
				st, body, err = door.do(ctx, "GET", "/sandboxes/"+door.sandbox, k.Key, nil, "")
				var got struct{ EnvdAccessToken string }
				if err != nil || st != 200 || json.Unmarshal([]byte(body), &got) != nil || got.EnvdAccessToken == "" {
					return attack.Escaped("the second key's get: %d %v %s", st, err, attack.Clip(attack.OneLine(body), 80))
				}
				signed := url("/tmp/signed.txt", e2bSign("/tmp/signed.txt", "read", "root", got.EnvdAccessToken, exp), exp)
				if st, body, err = door.do(ctx, "GET", signed, "", envd(door.sandbox, ""), ""); err != nil || st != 200 || body != "secret" {
					return attack.Escaped("the second key's signature did not read the file: %d %v %s", st, err, attack.Clip(attack.OneLine(body), 80))
				}
				if _, err := e.C.RevokeAPIKey(ctx, k.ID); err != nil {
					return attack.Escaped("revoking the second key: %v", err)
				}
				if st, body, err = door.do(ctx, "GET", signed, "", envd(door.sandbox, ""), ""); err != nil || st != 401 {
					return attack.Escaped("a revoked key's signed URL: %d %v %s", st, err, attack.Clip(attack.OneLine(body), 80))
				}
				seen = append(seen, "revoked key's 401")
				return attack.Contained("%s; its own 200", strings.Join(seen, ", "))
			}),
		x("port-token-reach", "with a port token of the sandbox's port 8000 (which opens that port through the E2B door's port access, as through berth's proxy), reach its port 8001, envd (a process start, a file read) and the control API", "401 or 403 for each: the token opens its one port only",
			func(ctx ctxT, e *attack.Env, door *e2bDoor) attack.Outcome {
				pt, err := e.C.CreatePortToken(ctx, door.sandbox, 8000, api.CreatePortTokenRequest{})
				if err != nil {
					return attack.Escaped("minting a port token: %v", err)
				}
				target := func(port string) map[string]string {
					return map[string]string{"E2b-Sandbox-Id": door.sandbox, "E2b-Sandbox-Port": port, "X-Access-Token": pt.Token}
				}
				start := target("49983")
				start["Content-Type"] = "application/connect+json"
				var bad []string
				for _, c := range []struct {
					what, method, path, key string
					hdr                     map[string]string
					body                    string
				}{
					{"port 8001", "GET", "/", "", target("8001"), ""},
					{"envd process start", "POST", "/process.Process/Start", "", start, connectEnvelope(`{"process":{"cmd":"/bin/id"}}`)},
					{"envd file read", "GET", "/files?path=/etc/hostname", "", target("49983"), ""},
					{"control get", "GET", "/sandboxes/" + door.sandbox, pt.Token, nil, ""},
					{"control kill", "DELETE", "/sandboxes/" + door.sandbox, pt.Token, nil, ""},
				} {
					st, body, err := door.do(ctx, c.method, c.path, c.key, c.hdr, c.body)
					if err != nil {
						return attack.Escaped("%s: %v", c.what, err)
					}
					if st != 401 && st != 403 && !strings.Contains(body, `"unauthenticated"`) && !strings.Contains(body, `"permission_denied"`) {
						bad = append(bad, fmt.Sprintf("%s: %d %s", c.what, st, attack.Clip(attack.OneLine(body), 60)))
					}
				}
				if len(bad) > 0 {
					return attack.Escaped("%s", strings.Join(bad, "; "))
				}
				return attack.Contained("5 of 5 refused")
			}),
	}
}

// e2bSign is the SDK's file URL signature (internal/e2b/signing.go).
func e2bSign(path, op, user, token, exp string) string {
	sum := sha256.Sum256([]byte(path + ":" + op + ":" + user + ":" + token + ":" + exp))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

// connectEnvelope is one Connect streaming message (flags 0) holding msg.
func connectEnvelope(msg string) string {
	var b bytes.Buffer
	b.WriteByte(0)
	_ = binary.Write(&b, binary.BigEndian, uint32(len(msg)))
	b.WriteString(msg)
	return b.String()
}

// e2bDoor is one attack's setting on the E2B door: a tenant of its own
// with a member and a viewer key, and a sandbox the member made through
// the door (its id and envd token).
type e2bDoor struct {
	e                      *attack.Env
	tenant, member, viewer string
	sandbox, token         string
	hc                     *http.Client
}

func newE2BDoor(ctx context.Context, e *attack.Env) (*e2bDoor, error) {
	d := &e2bDoor{e: e, tenant: "selftest-e2b-" + e.Tag, hc: &http.Client{Timeout: 2 * time.Minute}}
	if _, err := e.C.CreateTenant(ctx, d.tenant); err != nil {
		return nil, err
	}
	for _, k := range []struct {
		role string
		dst  *string
	}{{"member", &d.member}, {"viewer", &d.viewer}} {
		key, err := e.C.CreateAPIKey(ctx, api.CreateAPIKeyRequest{Name: d.tenant + "-" + k.role, Tenant: d.tenant, Role: k.role})
		if err != nil {
			d.cleanup(context.WithoutCancel(ctx))
			return nil, err
		}
		*k.dst = key.Key
	}
	st, body, err := d.do(ctx, "POST", "/v2/sandboxes", d.member, nil, `{"templateID":"base","timeout":300,"metadata":{"berth-selftest":"`+e.Tag+`"}}`)
	var out struct{ SandboxID, EnvdAccessToken string }
	if err == nil && (st != 201 || json.Unmarshal([]byte(body), &out) != nil || out.EnvdAccessToken == "") {
		err = fmt.Errorf("create through the door: %d %s", st, attack.Clip(attack.OneLine(body), 80))
	}
	if err != nil {
		d.cleanup(context.WithoutCancel(ctx))
		return nil, err
	}
	d.sandbox, d.token = out.SandboxID, out.EnvdAccessToken
	return d, nil
}

// do sends one request to the door: key as X-API-Key when set, the
// headers, a JSON body when body is set (unless a Content-Type is given).
func (d *e2bDoor) do(ctx context.Context, method, path, key string, hdr map[string]string, body string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, d.e.Target.E2B+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b), nil
}

// cleanup deletes the sandbox and the tenant (with its keys).
func (d *e2bDoor) cleanup(ctx context.Context) {
	if d.sandbox != "" {
		d.e.Delete(ctx, d.sandbox)
	}
	d.e.C.DeleteTenant(ctx, d.tenant)
}
