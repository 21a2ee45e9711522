package failpoint

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]Term
	}{
		{"a", map[string]Term{"a": {Action: Kill}}},
		{"a,b", map[string]Term{"a": {Action: Kill}, "b": {Action: Kill}}},
		{"a=return(x, y);b=sleep(10ms)", map[string]Term{"a": {Action: Return, Msg: "x, y"}, "b": {Action: Sleep, Delay: 10 * time.Millisecond}}},
		{`a=error("disk gone")`, map[string]Term{"a": {Action: Return, Msg: "disk gone"}}},
		{"a=2*panic(p)", map[string]Term{"a": {Action: Panic, Msg: "p", Count: 2}}},
		{"a=sleep(100)", map[string]Term{"a": {Action: Sleep, Delay: 100 * time.Millisecond}}},
		{"a=return()", map[string]Term{"a": {Action: Return, Msg: "injected error"}}},
		{" a = off ; ", map[string]Term{"a": {Action: Off}}},
		{"", map[string]Term{}},
	} {
		got, err := Parse(tc.in)
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%q: %v, want %v", tc.in, got, tc.want)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Fatalf("%q: %s = %+v, want %+v", tc.in, k, got[k], v)
			}
		}
	}
	for _, bad := range []string{"=kill", "a=explode", "a=sleep(soon)", "a=0*return(x)", "a=return(x"} {
		if _, err := Parse(bad); err == nil {
			t.Fatalf("%q parsed", bad)
		}
	}
}

// arm points the package at a fresh file holding s, as
// BERTH_FAILPOINTS_FILE does in a daemon.
func arm(t *testing.T, s string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fp")
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	old := file
	file = p
	mu.Lock()
	fileText, filePts = nil, nil
	mu.Unlock()
	t.Cleanup(func() { file = old })
}

func TestInjectFromFile(t *testing.T) {
	if err := Inject("x"); err != nil {
		t.Fatalf("unarmed point failed: %v", err)
	}
	arm(t, "x=return(boom);once=1*error(first);p=panic(bang);s=sleep(1ms)")
	err := Inject("x")
	var fe *Error
	if !errors.As(err, &fe) || fe.Point != "x" || fe.Msg != "boom" || err.Error() != "failpoint x: boom" {
		t.Fatalf("Inject(x) = %v", err)
	}
	if err := Inject("y"); err != nil {
		t.Fatalf("unlisted point failed: %v", err)
	}
	if err := Inject("once"); err == nil {
		t.Fatal("1* point did not fire on its first hit")
	}
	if err := Inject("once"); err != nil {
		t.Fatalf("1* point fired twice: %v", err)
	}
	if err := Inject("s"); err != nil {
		t.Fatalf("sleep point failed: %v", err)
	}
	func() {
		defer func() {
			if r := recover(); r != "failpoint p: bang" {
				t.Fatalf("recovered %v", r)
			}
		}()
		Inject("p")
		t.Fatal("panic point returned")
	}()
	// Rewriting the file re-arms, with fresh counts; Hit ignores a
	// return term.
	if err := os.WriteFile(file, []byte("once=1*return(again)"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Inject("x"); err != nil {
		t.Fatalf("disarmed point failed: %v", err)
	}
	if err := Inject("once"); err == nil {
		t.Fatal("re-armed point did not fire")
	}
	Hit("once")
}

func TestArm(t *testing.T) {
	disarm, err := Arm("a=return(armed)")
	if err != nil {
		t.Fatal(err)
	}
	if err := Inject("a"); err == nil || err.Error() != "failpoint a: armed" {
		t.Fatalf("armed point: %v", err)
	}
	disarm()
	if err := Inject("a"); err != nil {
		t.Fatalf("disarmed point: %v", err)
	}
	if _, err := Arm("a=nonsense"); err == nil {
		t.Fatal("bad spec armed")
	}
}
