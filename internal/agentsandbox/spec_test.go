package agentsandbox

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/berth-sh/berth/internal/access"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/server/input"
)

var templates = map[string]string{"berth.local/base:test": "base"}

func parse(t testing.TB, spec string) (*Mapping, error) {
	t.Helper()
	var obj unstructured.Unstructured
	if err := json.Unmarshal([]byte(`{"spec":`+spec+`}`), &obj.Object); err != nil {
		return nil, errdefs.Invalid("%v", err)
	}
	var bp blueprint
	if err := specOf(&obj, &bp); err != nil {
		return nil, err
	}
	m, err := mapBlueprint(&bp, templates, time.Unix(1000, 0))
	if err != nil {
		return nil, err
	}
	// What the gate does with it: REST's rules.
	return m, access.Check(input.Request(&m.Req))
}

func TestMapBlueprint(t *testing.T) {
	m, err := parse(t, `{"podTemplate":{"spec":{"containers":[{"name":"c","image":"berth.local/base:test",
		"command":["sleep"],"env":[{"name":"K","value":"v"}],
		"resources":{"limits":{"cpu":"250m","memory":"128Mi","ephemeral-storage":"256Mi"}}}]}},
		"shutdownTime":"1970-01-01T00:26:40Z"}`)
	if err != nil {
		t.Fatal(err)
	}
	r := m.Req
	if r.Template != "base" || r.Env["K"] != "v" || r.Resources.CPUs != 0.25 || r.Resources.MemoryBytes != 128<<20 ||
		r.Resources.DiskBytes != 256<<20 || r.TimeoutSeconds != 601 {
		t.Fatalf("mapped %+v", r)
	}
	if len(m.NotServed) != 1 || !strings.HasPrefix(m.NotServed[0], "command/args") {
		t.Fatalf("not served %v", m.NotServed)
	}
	for name, spec := range map[string]string{
		"two containers":   `{"podTemplate":{"spec":{"containers":[{"name":"a","image":"berth.local/base:test"},{"name":"b","image":"berth.local/base:test"}]}}}`,
		"image not served": `{"podTemplate":{"spec":{"containers":[{"name":"a","image":"evil.example/miner"}]}}}`,
		"valueFrom":        `{"podTemplate":{"spec":{"containers":[{"name":"a","image":"berth.local/base:test","env":[{"name":"K","valueFrom":{"secretKeyRef":{"name":"s","key":"k"}}}]}]}}}`,
		"negative memory":  `{"podTemplate":{"spec":{"containers":[{"name":"a","image":"berth.local/base:test","resources":{"limits":{"memory":"-1"}}}]}}}`,
		"past shutdown":    `{"podTemplate":{"spec":{"containers":[{"name":"a","image":"berth.local/base:test"}]}},"shutdownTime":"1970-01-01T00:00:01Z"}`,
		"foreground":       `{"podTemplate":{"spec":{"containers":[{"name":"a","image":"berth.local/base:test"}]}},"shutdownPolicy":"DeleteForeground"}`,
		"suspended":        `{"podTemplate":{"spec":{"containers":[{"name":"a","image":"berth.local/base:test"}]}},"operatingMode":"Suspended"}`,
		"bad env name":     `{"podTemplate":{"spec":{"containers":[{"name":"a","image":"berth.local/base:test","env":[{"name":"A=B","value":"v"}]}]}}}`,
		"tiny cpu":         `{"podTemplate":{"spec":{"containers":[{"name":"a","image":"berth.local/base:test","resources":{"limits":{"cpu":"1m"}}}]}}}`,
		"workdir with ESC": `{"podTemplate":{"spec":{"containers":[{"name":"a","image":"berth.local/base:test","workingDir":"/a\u001bb"}]}}}`,
		"not an object":    `"x"`,
	} {
		if _, err := parse(t, spec); !errors.Is(err, errdefs.ErrInvalid) && !errors.Is(err, errdefs.ErrLimit) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
}

// FuzzMapBlueprint: no spec makes the mapping panic, and what it accepts
// names a served template and holds only checked env.
func FuzzMapBlueprint(f *testing.F) {
	f.Add(`{"podTemplate":{"spec":{"containers":[{"name":"c","image":"berth.local/base:test","env":[{"name":"K","value":"v"}],"resources":{"limits":{"cpu":"1"}}}]}}}`)
	f.Add(`{"podTemplate":{"spec":{"containers":[]}}}`)
	f.Add(`{"podTemplate":{"spec":{"containers":[{"image":"berth.local/base:test","resources":{"requests":{"memory":"1e100"}}}]}},"shutdownTime":"2030-01-01T00:00:00Z"}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, spec string) {
		m, err := parse(t, spec)
		if err != nil {
			return
		}
		if m.Req.Template != "base" || m.Req.Resources.CPUs < 0 || m.Req.Resources.MemoryBytes < 0 || m.Req.TimeoutSeconds < 0 {
			t.Fatalf("accepted %q as %+v", spec, m.Req)
		}
	})
}

func TestRefusalOf(t *testing.T) {
	for _, c := range []struct {
		err    error
		reason string
	}{
		{errdefs.QuotaExceeded(time.Second, "tenant t: 2 of 2 concurrent sandboxes in use"), "QuotaExceeded"},
		{errdefs.Permission("no"), "Forbidden"},
		{errdefs.Invalid("bad"), "InvalidSpec"},
		{errdefs.Limit("max_labels", 1, "x"), "InvalidSpec"},
	} {
		var r *refusal
		if !errors.As(refusalOf(c.err), &r) || r.reason != c.reason {
			t.Errorf("refusalOf(%v) = %v, want reason %s", c.err, refusalOf(c.err), c.reason)
		}
	}
	if err := refusalOf(errors.New("apiserver down")); errors.As(err, new(*refusal)) {
		t.Error("a transient error became a refusal: it would not be retried with backoff")
	}
}
