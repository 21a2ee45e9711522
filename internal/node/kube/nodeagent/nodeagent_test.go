package nodeagent

import (
	"errors"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

const (
	idA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	idB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func entry(id, status, typ, ns, name string) string {
	return `{"ociVersion":"1.0.2","id":"` + id + `","status":"` + status + `","pid":1,"bundle":"/b","annotations":{` +
		`"io.kubernetes.cri.container-type":"` + typ + `","io.kubernetes.cri.sandbox-namespace":"` + ns + `",` +
		`"io.kubernetes.cri.sandbox-name":"` + name + `"}}`
}

func list(entries ...string) []byte { return []byte("[" + strings.Join(entries, ",") + "]\n") }

func TestFindSandbox(t *testing.T) {
	for _, tc := range []struct {
		name   string
		list   []byte
		id     string
		status string
		err    error
	}{
		{"running", list(entry(idA, "running", "sandbox", "ns", "berth-x")), idA, "running", nil},
		{"paused", list(entry(idA, "paused", "sandbox", "ns", "berth-x")), idA, "paused", nil},
		{"the pod's other containers do not count", list(entry(idB, "running", "container", "ns", "berth-x"),
			entry(idA, "running", "sandbox", "ns", "berth-x")), idA, "running", nil},
		{"a stopped sandbox of an old pod of that name", list(entry(idB, "stopped", "sandbox", "ns", "berth-x"),
			entry(idA, "running", "sandbox", "ns", "berth-x")), idA, "running", nil},
		{"another namespace", list(entry(idA, "running", "sandbox", "other", "berth-x")), "", "", errdefs.ErrNotFound},
		{"another pod", list(entry(idA, "running", "sandbox", "ns", "berth-y")), "", "", errdefs.ErrNotFound},
		{"none at all (runsc prints null)", []byte("null\n"), "", "", errdefs.ErrNotFound},
		{"empty", nil, "", "", errdefs.ErrNotFound},
		{"two live", list(entry(idA, "running", "sandbox", "ns", "berth-x"), entry(idB, "paused", "sandbox", "ns", "berth-x")),
			"", "", errdefs.ErrConflict},
		{"an id that could be a flag", list(entry("--root=/", "running", "sandbox", "ns", "berth-x")), "", "", nil},
		{"not JSON", []byte("ID PID STATUS"), "", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, status, err := FindSandbox(tc.list, "ns", "berth-x")
			if tc.id != "" {
				if err != nil || id != tc.id || status != tc.status {
					t.Fatalf("= %q %q %v, want %q %q", id, status, err, tc.id, tc.status)
				}
				return
			}
			if err == nil {
				t.Fatalf("= %q %q, want an error", id, status)
			}
			if tc.err != nil && !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
		})
	}
}

func TestAllowed(t *testing.T) {
	s, err := New(Config{Runsc: "/bin/false", Root: "/nonexistent", Namespaces: []string{"berth-sandboxes"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ns, pod string
		ok      bool
	}{
		{"berth-sandboxes", "berth-0123abcd", true},
		{"default", "berth-0123abcd", false},
		{"berth-sandboxes", "kube-proxy", false},
		{"berth-sandboxes", "berth-", false},
		{"berth-sandboxes", "berth-../x", false},
		{"berth-sandboxes", "berth-" + strings.Repeat("a", 60), false},
		{"berth-sandboxes", "BERTH-abc", false},
	} {
		err := s.allowed(tc.ns, tc.pod)
		if (err == nil) != tc.ok {
			t.Errorf("allowed(%q, %q) = %v, want ok %v", tc.ns, tc.pod, err, tc.ok)
		}
		if err != nil && !errors.Is(err, errdefs.ErrPermission) {
			t.Errorf("allowed(%q, %q) = %v, want permission denied", tc.ns, tc.pod, err)
		}
	}
	if _, err := New(Config{Runsc: "/bin/false", Root: "/r", Namespaces: []string{"Bad_NS"}}); err == nil {
		t.Error("a namespace that is not a DNS label was accepted")
	}
}

// FuzzFindSandbox: whatever runsc printed, an answer is a well-formed
// container id and a status the node agent knows, or an error.
func FuzzFindSandbox(f *testing.F) {
	f.Add(list(entry(idA, "running", "sandbox", "ns", "berth-x")), "ns", "berth-x")
	f.Add(list(entry(idA, "paused", "sandbox", "ns", "berth-x"), entry(idB, "created", "container", "ns", "berth-x")), "ns", "berth-x")
	f.Add([]byte("null"), "ns", "p")
	f.Add([]byte(`[{"id":"x","annotations":null}]`), "", "")
	f.Fuzz(func(t *testing.T, data []byte, ns, name string) {
		id, status, err := FindSandbox(data, ns, name)
		if err != nil {
			return
		}
		if !containerIDRE.MatchString(id) || (status != StatusRunning && status != StatusPaused) {
			t.Fatalf("FindSandbox = %q %q", id, status)
		}
	})
}
