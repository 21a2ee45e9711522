package convert

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/store"
)

// FuzzDecodeRequests feeds arbitrary bodies to the request decoder and the
// validation behind it: never a panic, and every rejection is a 4xx
// category, never an internal error.
func FuzzDecodeRequests(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"template":"base","resources":{"cpus":2,"memory_bytes":268435456,"pids":64}}`,
		`{"env":{"A":"b"},"labels":{"x":"y"},"timeout_seconds":1.5}`,
		`{"cmd":["sh","-c","echo hi"],"env":{"K":"V"},"workdir":"/tmp","stdin":"aGVsbG8="}`,
		`{"resources":{"cpus":-1}}`, `{"timeout_seconds":1e308}`, `{"cmd":["a\u0000b"]}`,
		`[]`, `null`, `{"name":"` + strings.Repeat("x", 100) + `"}`, `{"a":1}{"b":2}`, "\xff\xfe",
		`{"resources":{"cpus":0.0099}}`, `{"resources":{"cpus":1e-9}}`, `{"env":{"A":"\u0000"}}`,
		`{"workdir":"/a\u0000"}`, `{"name":"a","name":"b"}`, `{"cmd":["ls"],"user":"\n"}`,
	} {
		f.Add(s)
	}
	tpl := &store.Template{Name: "base"}
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest("POST", "/v1/sandboxes", strings.NewReader(body))
		var c api.CreateSandboxRequest
		if err := input.Decode(r, &c); err != nil {
			assert4xx(t, err)
		} else if sp, err := engine.SpecFromRequest(CreateRequest(&c), tpl); err != nil {
			assert4xx(t, err)
		} else {
			// Accepted: valid by the spec's own rules, and within what
			// the kernel can enforce.
			if err := sp.Validate(); err != nil {
				t.Fatalf("accepted a spec its validation refuses: %v", err)
			}
			if sandbox.CPUQuota(sp.Resources.CPUs) < sandbox.MinCPUQuota {
				t.Fatalf("accepted cpus %g: quota %d", sp.Resources.CPUs, sandbox.CPUQuota(sp.Resources.CPUs))
			}
			for k, v := range sp.Env {
				if strings.ContainsRune(k+v, 0) || strings.ContainsRune(sp.Workdir, 0) {
					t.Fatalf("accepted a NUL in env %q or workdir", k)
				}
			}
		}
		r = httptest.NewRequest("POST", "/v1/sandboxes/x/exec", strings.NewReader(body))
		var e api.ExecRequest
		if err := input.Decode(r, &e); err != nil {
			assert4xx(t, err)
		} else if err := ExecRequest(&e).Validate(); err != nil {
			assert4xx(t, err)
		}
	})
}

func assert4xx(t *testing.T, err error) {
	t.Helper()
	code, status := errdefs.Code(err)
	if status < 400 || status >= 500 {
		if status != 501 { // a feature not built yet is reported as such
			t.Fatalf("rejection %v maps to %d %s, want 4xx", err, status, code)
		}
	}
}
