package engine

import (
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

// TestValidateExecOneRuleSet: the rules every door's exec meets (the E2B
// door reaches the engine without input.Validate): control bytes
// in env names, values, the user and the workdir are refused here, where
// the E2B door once let them through.
func TestValidateExecOneRuleSet(t *testing.T) {
	ok := ExecRequest{Cmd: []string{"sh", "-c", "echo \x1b[1m"}, Env: map[string]string{"PEM": "a\nb\tc"}, Workdir: "/w", User: "1000:1000"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("a good request: %v", err)
	}
	for name, mut := range map[string]func(*ExecRequest){
		"no command":         func(r *ExecRequest) { r.Cmd = nil },
		"empty command":      func(r *ExecRequest) { r.Cmd = []string{""} },
		"NUL in an argument": func(r *ExecRequest) { r.Cmd = []string{"echo", "a\x00b"} },
		"empty env name":     func(r *ExecRequest) { r.Env = map[string]string{"": "x"} },
		"= in an env name":   func(r *ExecRequest) { r.Env = map[string]string{"A=B": "x"} },
		"ESC in an env name": func(r *ExecRequest) { r.Env = map[string]string{"A\x1b": "x"} },
		"newline in a name":  func(r *ExecRequest) { r.Env = map[string]string{"A\nB": "x"} },
		"NUL in a value":     func(r *ExecRequest) { r.Env = map[string]string{"A": "x\x00"} },
		"ESC in a value":     func(r *ExecRequest) { r.Env = map[string]string{"A": "x\x1b"} },
		"relative workdir":   func(r *ExecRequest) { r.Workdir = "w" },
		"CR in the workdir":  func(r *ExecRequest) { r.Workdir = "/w\r" },
		"newline in user":    func(r *ExecRequest) { r.User = "root\nx" },
		"too many args":      func(r *ExecRequest) { r.Cmd = make([]string, maxArgs+1); r.Cmd[0] = "x" },
		"stdin too large":    func(r *ExecRequest) { r.Stdin = make([]byte, maxExecStdin+1) },
	} {
		r := ok
		r.Env = map[string]string{}
		mut(&r)
		err := r.Validate()
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if _, status := errdefs.Code(err); status < 400 || status >= 500 {
			t.Errorf("%s: %v (status %d), want a 4xx error", name, err, status)
		}
	}
	// A run's command may come from its template: the rest still holds.
	if err := (&ExecRequest{Env: map[string]string{"A\x1b": "x"}}).CheckFields(); err == nil {
		t.Error("CheckFields accepted a control byte in an env name")
	}
	if err := (&ExecRequest{}).CheckFields(); err != nil {
		t.Errorf("CheckFields refused a request without a command: %v", err)
	}
}
