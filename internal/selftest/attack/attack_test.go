package attack

import (
	"testing"

	"github.com/berth-sh/berth/api"
)

func TestSysCheck(t *testing.T) {
	for _, tc := range []struct {
		out    string
		exit   api.ExecExit
		accept []string
		want   bool
	}{
		{"RESULT err EPERM\n", api.ExecExit{}, nil, true},
		{"RESULT err ENOSYS\n", api.ExecExit{}, []string{"ENOSYS"}, true},
		{"RESULT err EINVAL\n", api.ExecExit{}, nil, false}, // past the permission check
		{"RESULT err EPERM\n", api.ExecExit{}, []string{"ENOSYS"}, false},
		{"RESULT ok 3\n", api.ExecExit{}, nil, false},
		{"noise\nRESULT err confined\n", api.ExecExit{}, []string{"*"}, true},
		{"", api.ExecExit{Code: 159, Signal: "SIGSYS"}, nil, true},
		{"Traceback", api.ExecExit{Code: 1}, nil, false},
	} {
		if got := SysCheck(tc.out, tc.exit, tc.accept...); got.Contained != tc.want {
			t.Errorf("SysCheck(%q, %+v, %v) = %+v, want contained %v", tc.out, tc.exit, tc.accept, got, tc.want)
		}
	}
}

func TestReportedAndClip(t *testing.T) {
	if r, ok := Reported("a\nRESULT first\nb\nRESULT err EPERM\n"); !ok || r != "err EPERM" {
		t.Errorf("Reported = %q %v", r, ok)
	}
	if _, ok := Reported("no result"); ok {
		t.Error("Reported found a result in nothing")
	}
	if got := Clip("abcdef", 4); got != "abc…" {
		t.Errorf("Clip = %q", got)
	}
	if got := OneLine(" a\n b\t c "); got != "a b c" {
		t.Errorf("OneLine = %q", got)
	}
}
