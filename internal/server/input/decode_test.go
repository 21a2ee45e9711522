package input

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

func assert4xx(t *testing.T, err error) {
	t.Helper()
	code, status := errdefs.Code(err)
	if status < 400 || status >= 500 {
		if status != 501 { // a feature not built yet is reported as such
			t.Fatalf("rejection %v maps to %d %s, want 4xx", err, status, code)
		}
	}
}

func TestDecodeStrict(t *testing.T) {
	for _, tc := range []struct {
		body string
		ok   bool
		msg  string
	}{
		{`{"name":"a"}`, true, ""},
		{`null`, false, "null"},
		{` null `, false, "null"},
		{``, false, "empty"},
		{`  `, false, "empty"},
		{`[]`, false, "JSON object"},
		{`"x"`, false, "JSON object"},
		{`{"name":"a","name":"b"}`, false, `duplicate key "name"`},
		{`{"name":"a","NAME":"b"}`, false, `duplicate key "NAME"`},   // encoding/json folds struct field names
		{`{"name":"a","nam\u0065":"b"}`, false, "duplicate key"},     // escapes are decoded first
		{`{"name":"a","ſize_bytes":1,"size_bytes":2}`, false, "dup"}, // U+017F folds to s, as in encoding/json
		{`{"env":{"A":"1","a":"2"}}`, true, ""},                      // map keys are exact
		{`{"env":{"A":"1","A":"2"}}`, false, `duplicate key "A" in env`},
		{`{"volumes":[{"name":"v","path":"/a","path":"/b"}]}`, false, "duplicate key"},
		{`{"unknown":{"x":1,"x":2}}`, false, "duplicate key"},
		{`{"name":"a"} {}`, false, "trailing"},
		{`{"name":"a"}x`, false, "trailing"},
		{`{"name":"a"`, false, "bad JSON"},
		{`{"unknown":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, false, "nested deeper"},
		{`{"bogus":1}`, false, "unknown field"},
	} {
		var req api.CreateSandboxRequest
		err := DecodeBytes([]byte(tc.body), &req)
		if tc.ok != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.msg) && tc.msg != "dup" {
			t.Errorf("%s: %v", tc.body, err)
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: %v is not invalid_argument", tc.body, err)
		}
	}
}

func TestEdgeValidation(t *testing.T) {
	for _, tc := range []struct {
		route string
		body  string
		msg   string // "" = accepted
	}{
		{"create", `{"resources":{"cpus":0.00001}}`, "at least 0.01"},
		{"create", `{"resources":{"cpus":0.0099}}`, "at least 0.01"},
		{"create", `{"resources":{"cpus":1e-9}}`, "at least 0.01"},
		{"create", `{"resources":{"cpus":0.01}}`, ""},
		{"create", `{"resources":{"cpus":65}}`, "at most 64"},
		{"create", `{"resources":{"memory_bytes":1048576}}`, "memory_bytes must be between 16 MiB"},
		{"create", `{"resources":{"pids":2}}`, "pids must be between 8"},
		{"create", `{"resources":{"pids":99999999}}`, "pids must be between"},
		{"create", `{"env":{"A":"x\u0000y"}}`, "NUL or control"},
		{"create", `{"env":{"A":"line1\nline2\tx"}}`, ""},
		{"create", `{"env":{"A":"\u001b[31m"}}`, "control"},
		{"create", `{"workdir":"/tmp/\u0000"}`, "workdir must not contain control"},
		{"create", `{"workdir":"/tmp/a\nb"}`, "workdir must not contain control"},
		{"create", `{"labels":{"k":"v\u0085"}}`, "control"},
		{"create", `{"template":"base\u0000"}`, "template must not"},
		{"create", `{"name":"x\u0007"}`, "name must not"},
		{"create", `{"volumes":[{"name":"v","path":"/w\u0000"}]}`, "path must not"},
		{"create", `{"allow":["example.com\n"]}`, "allow rule"},
		{"create", `{"timeout_seconds":1e300}`, "timeout_seconds must be between"},
		{"create", `{"idle_timeout_seconds":-1}`, "idle_timeout_seconds"},
		{"create", `{"volume_size_bytes":-1}`, "negative"},
		{"exec", `{"cmd":["sh","-c","printf '\n'"]}`, ""},
		{"exec", `{"cmd":["ls"],"workdir":"/a\u0000"}`, "workdir"},
		{"exec", `{"cmd":["ls"],"user":"root\n"}`, "user"},
		{"exec", `{"cmd":["ls"],"env":{"A\u0001":"b"}}`, "env name"},
		{"exec", `{"cmd":["ls"],"env":{"A":"b\u0000"}}`, "NUL"},
		{"exec", `{"cmd":["ls"],"timeout_seconds":-1}`, "timeout_seconds"},
		{"volume", `{"name":"v\u0000"}`, "volume name"},
		{"volume", `{"name":"v","size_bytes":-5}`, "negative"},
		{"snapshot", `{"name":"s\r"}`, "snapshot name"},
		{"export", `{"paths":["/a","/b\u0000"]}`, "export path"},
		{"copy", `{"from":"a","from_path":"/x","to":"b","to_path":"/y\u0000"}`, "to_path"},
		{"fork", `{"env":{"A":"\u0000"}}`, "NUL"},
		{"fork", `{"count":2,"labels":{"a":"\u007f"}}`, "control"},
		{"pool", `{"min":-1}`, "negative"},
		{"network", `{"allow":["1.2.3.4\u0000"]}`, "network rule"},
		{"build", `{"name":"t","from":"base","run":["echo a\u0000"]}`, "NUL"},
		{"build", `{"name":"t","from":"base","run":["echo a\necho b"]}`, ""},
		{"import", `{"name":"t","ref":"x\u0000"}`, "ref"},
		{"process", `{"cmd":["sleep","9"],"tag":"web","restart":"always"}`, ""},
		{"process", `{"cmd":["ls"],"env":{"A\u001bB":"1"}}`, "env name"},
		{"process", `{"cmd":["ls"],"workdir":"/tmp/\u001b[31m"}`, "workdir"},
		{"process", `{"cmd":["ls"],"workdir":"tmp"}`, "absolute"},
		{"process", `{"cmd":["ls"],"stdin":"eA=="}`, "stdin"},
		{"process", `{"cmd":["ls"],"timeout_seconds":1e-12}`, "no timeout"},
		{"process", `{"cmd":["ls"],"tag":"1abc"}`, "tag"},
		{"process", `{"cmd":["ls"],"restart":"sometimes"}`, "restart policy"},
		{"process", `{"cmd":["ls"],"ready_port":70000}`, "ready_port"},
		{"process", `{"cmd":[]}`, "cmd is required"},
	} {
		var v any
		switch tc.route {
		case "create":
			v = &api.CreateSandboxRequest{}
		case "exec":
			v = &api.ExecRequest{}
		case "volume":
			v = &api.CreateVolumeRequest{}
		case "snapshot":
			v = &api.CreateSnapshotRequest{}
		case "export":
			v = &api.ExportRequest{}
		case "copy":
			v = &api.CopyRequest{}
		case "fork":
			v = &api.ForkRequest{}
		case "pool":
			v = &api.PoolRequest{}
		case "network":
			v = &api.NetworkRulesRequest{}
		case "build":
			v = &api.BuildTemplateRequest{}
		case "import":
			v = &api.ImportTemplateRequest{}
		case "process":
			v = &api.StartProcessRequest{}
		}
		err := DecodeBytes([]byte(tc.body), v)
		if tc.msg == "" && err != nil || tc.msg != "" && (err == nil || !strings.Contains(err.Error(), tc.msg)) {
			t.Errorf("%s %s: %v, want %q", tc.route, tc.body, err, tc.msg)
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s %s: %v is not invalid_argument", tc.route, tc.body, err)
		}
	}
}

// FuzzCheckJSON: whatever the strict decoder accepts, encoding/json reads
// the same way (no second reading of the bytes that differs), and it
// never panics.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"name":"a","env":{"A":"1","a":"2"}}`, `{"name":"a","NAME":"b"}`,
		`{"volumes":[{"name":"v","path":"/p"}],"labels":{"x":"y"}}`, `null`, `{"env":{"A":"1","A":"2"}}`,
		`{"resources":{"cpus":0.5,"cpus":2}}`, `{"policy":{}}`, `{"on_idle":"stop","idle_timeout_seconds":5}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var strict api.CreateSandboxRequest
		if err := DecodeBytes([]byte(body), &strict); err != nil {
			assert4xx(t, err)
			return
		}
		var loose api.CreateSandboxRequest
		if err := json.Unmarshal([]byte(body), &loose); err != nil {
			t.Fatalf("strict accepted what encoding/json refuses: %v", err)
		}
		if !reflect.DeepEqual(strict, loose) {
			t.Fatalf("two readings differ:\n%+v\n%+v", strict, loose)
		}
		if err := validateCreate(&strict); err != nil {
			t.Fatalf("accepted a body its validation refuses: %v", err)
		}
	})
}

// TestProcessStartOneValidate: the edge's check of a process start is
// the engine's Validate of the start as the engine takes it (the one the
// E2B door calls): every start one refuses the other refuses with the
// same error, and one it accepts the other accepts.
func TestProcessStartOneValidate(t *testing.T) {
	for _, req := range []api.StartProcessRequest{
		{ExecRequest: api.ExecRequest{Cmd: []string{"true"}}},
		{ExecRequest: api.ExecRequest{Cmd: []string{"true"}, Env: map[string]string{"A\x1bB": "1"}}},
		{ExecRequest: api.ExecRequest{Cmd: []string{"true"}, Env: map[string]string{"A=B": "1"}}},
		{ExecRequest: api.ExecRequest{Cmd: []string{"true"}, Workdir: "/tmp/\x1b[31m"}},
		{ExecRequest: api.ExecRequest{Cmd: []string{"true"}, User: "root\n"}},
		{ExecRequest: api.ExecRequest{Cmd: []string{"a\x00b"}}},
		{ExecRequest: api.ExecRequest{Cmd: []string{"true"}, Stdin: []byte("x")}},
		{ExecRequest: api.ExecRequest{Cmd: []string{"true"}}, Tag: "x y"},
		{ExecRequest: api.ExecRequest{Cmd: []string{"true"}}, Tag: "abcdef-1"},
		{ExecRequest: api.ExecRequest{Cmd: []string{"true"}}, MaxRestarts: -1},
	} {
		edge := Validate(&req)
		engine := StartRequest(&req).Validate()
		if fmt.Sprint(edge) != fmt.Sprint(engine) {
			t.Errorf("start %+v: the edge says %v, the engine %v", req, edge, engine)
		}
	}
}
