package selftest

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/selftest/attack"
	"github.com/berth-sh/berth/internal/selftest/catalogue"
)

func TestSelect(t *testing.T) {
	if n := len(Select(nil)); n != len(catalogue.All()) {
		t.Errorf("Select(nil) = %d attacks, want all %d", n, len(catalogue.All()))
	}
	for _, tc := range []struct {
		only []string
		want func(*attack.Attack) bool
	}{
		{[]string{"kernel"}, func(a *attack.Attack) bool { return a.Category == attack.CatKernel }},
		{[]string{"agent.*"}, func(a *attack.Attack) bool { return strings.HasPrefix(a.ID, "agent.") }},
		{[]string{"api.lease"}, func(a *attack.Attack) bool { return strings.HasPrefix(a.ID, "api.lease") }},
		{[]string{"kernel.bpf", "files"}, func(a *attack.Attack) bool { return a.ID == "kernel.bpf" || strings.Contains(a.ID, "files") }},
	} {
		got := Select(tc.only)
		if len(got) == 0 {
			t.Errorf("%v selects nothing", tc.only)
		}
		for _, a := range got {
			if !tc.want(a) {
				t.Errorf("%v selected %s", tc.only, a.ID)
			}
		}
	}
	if len(Select([]string{"no-such-attack"})) != 0 {
		t.Error("a pattern matching nothing selected something")
	}
}

func testReport() *Report {
	return &Report{Runtimes: []string{"runc", "runsc"}, Seconds: 12,
		Results: []Result{
			{ID: "kernel.bpf", Category: attack.CatKernel, Runtime: "runc", Expected: "EPERM", Observed: "refused: EPERM", Contained: true},
			{ID: "agent.impostor", Category: attack.CatAgent, Runtime: "runc", Expected: "never reached", Observed: strings.Repeat("x", 200)},
			{ID: "api.bad-key", Category: attack.CatAPI, Runtime: "runsc", Expected: "401", Observed: "n/a: needs TCP", NA: true},
		},
		Totals: []Total{{Runtime: "runc", Attacks: 2, Contained: 1, Uncontained: 1}, {Runtime: "runsc", Attacks: 1, NA: 1}},
	}
}

func TestWriteTable(t *testing.T) {
	rep := testReport()
	var b bytes.Buffer
	if err := WriteTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"RUNTIME", "ATTACK", "EXPECTED", "OBSERVED", "CONTAINED",
		"kernel.bpf", "refused: EPERM", " yes\n", " NO\n", " n/a\n",
		"total runc: 2 attacks, 1 contained, 1 not contained, 0 n/a\n",
		"total runsc: 1 attacks, 0 contained, 0 not contained, 1 n/a\n",
		"cleanup: every sandbox deleted, doctor healthy",
		"FAIL: 3 attack runs on runc,runsc in 12s, 1 not contained",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if len([]rune(l)) > 220 {
			t.Errorf("line not clipped (%d runes): %s", len([]rune(l)), l)
		}
	}
	if !rep.Failed() || rep.Uncontained() != 1 {
		t.Errorf("Failed %v Uncontained %d", rep.Failed(), rep.Uncontained())
	}
	rep.Results[1].Contained = true
	if rep.Failed() {
		t.Error("n/a rows must not fail the run")
	}
	rep.Cleanup = []string{"sandbox x left"}
	if !rep.Failed() {
		t.Error("a cleanup problem must fail the run")
	}
	b.Reset()
	WriteTable(&b, rep)
	if !strings.Contains(b.String(), "cleanup: 1 problem(s):\n  sandbox x left") {
		t.Errorf("cleanup not shown:\n%s", b.String())
	}
}

func TestWriteJSON(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJSON(&b, testReport()); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Results) != 3 || back.Results[2].NA != true || back.Totals[0].Uncontained != 1 {
		t.Errorf("round trip: %+v", back)
	}
}

func TestWriteCatalogue(t *testing.T) {
	var b bytes.Buffer
	if err := WriteCatalogue(&b, catalogue.All()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if n := strings.Count(out, "\n| `"); n != len(catalogue.All()) {
		t.Errorf("%d rows, want %d", n, len(catalogue.All()))
	}
	if !strings.Contains(out, "| `kernel.clone3` | runc, kata |") {
		t.Errorf("classes not shown:\n%s", out[:500])
	}
}
