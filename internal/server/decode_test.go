package server

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/manager"
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
	} {
		f.Add(s)
	}
	tpl := &store.Template{Name: "base"}
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest("POST", "/v1/sandboxes", strings.NewReader(body))
		var c api.CreateSandboxRequest
		if err := decode(r, &c); err != nil {
			assert4xx(t, err)
		} else if _, err := manager.SpecFromRequest(&c, tpl); err != nil {
			assert4xx(t, err)
		}
		r = httptest.NewRequest("POST", "/v1/sandboxes/x/exec", strings.NewReader(body))
		var e api.ExecRequest
		if err := decode(r, &e); err != nil {
			assert4xx(t, err)
		} else if err := manager.ValidateExec(&e); err != nil {
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
