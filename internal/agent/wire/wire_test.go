package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestWireEncoding pins the bytes of every message of the protocol.
// Agents already running in sandboxes speak them: a change here breaks
// every sandbox created before the daemon was upgraded. Add optional
// fields; never rename, retype or remove one.
func TestWireEncoding(t *testing.T) {
	uid, gid := 1000, 0
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	for _, tc := range []struct {
		name string
		v    any // a pointer to the message
		want string
	}{
		{"request exec", &Request{V: 1, Op: OpExec, Exec: &ExecSpec{
			Argv: []string{"sh", "-c", "ls"}, Env: []string{"PATH=/bin"}, Dir: "/w", User: "1000:1000",
			TTY: true, Rows: 24, Cols: 80, TimeoutMS: 1500}},
			`{"v":1,"op":"exec","exec":{"argv":["sh","-c","ls"],"env":["PATH=/bin"],"dir":"/w","user":"1000:1000","tty":true,"rows":24,"cols":80,"timeout_ms":1500}}`},
		{"request exec minimal", &Request{V: 1, Op: OpExec, Exec: &ExecSpec{Argv: []string{"true"}}},
			`{"v":1,"op":"exec","exec":{"argv":["true"]}}`},
		{"request write_file", &Request{V: 1, Op: OpWriteFile, Path: "/a/b", Mode: 0o644, UID: &uid, GID: &gid},
			`{"v":1,"op":"write_file","path":"/a/b","mode":420,"uid":1000,"gid":0}`},
		{"request mkdir", &Request{V: 1, Op: OpMkdir, Path: "/d", Mode: 0o755, Parents: true},
			`{"v":1,"op":"mkdir","path":"/d","mode":493,"parents":true}`},
		{"request mkdir owned", &Request{V: 1, Op: OpMkdir, Path: "/workspace", Parents: true, Owner: "dev"},
			`{"v":1,"op":"mkdir","path":"/workspace","parents":true,"owner":"dev"}`},
		{"request remove", &Request{V: 1, Op: OpRemove, Path: "/d", Recursive: true},
			`{"v":1,"op":"remove","path":"/d","recursive":true}`},
		{"request dial", &Request{V: 1, Op: OpDial, Port: 8080}, `{"v":1,"op":"dial","port":8080}`},
		{"request ping", &Request{V: 1, Op: OpPing}, `{"v":1,"op":"ping"}`},
		{"ping result", &PingResult{Version: "v1.2.3", PID: 1, UptimeNS: 42},
			`{"version":"v1.2.3","pid":1,"uptime_ns":42}`},
		{"dial result", &DialResult{Addr: "127.0.0.1:8080"}, `{"addr":"127.0.0.1:8080"}`},
		{"signal", &SignalMsg{Signal: "SIGINT"}, `{"signal":"SIGINT"}`},
		{"resize", &Resize{Rows: 50, Cols: 120}, `{"rows":50,"cols":120}`},
		{"error", &Error{Code: CodeNotFound, Message: "stat /x: no such file"},
			`{"code":"not_found","message":"stat /x: no such file"}`},
		{"exit", &Exit{Code: 137, Signal: "SIGKILL", TimedOut: true, DurationMS: 12.5},
			`{"code":137,"signal":"SIGKILL","timed_out":true,"oom_killed":false,"duration_ms":12.5}`},
		{"exit zero", &Exit{}, `{"code":0,"timed_out":false,"oom_killed":false,"duration_ms":0}`},
		{"request proc_start", &Request{V: 1, Op: OpProcStart, Exec: &ExecSpec{Argv: []string{"srv"}},
			Proc: &ProcRequest{Tag: "service", Restart: RestartOnFailure, MaxRestarts: 5}},
			`{"v":1,"op":"proc_start","exec":{"argv":["srv"]},"proc":{"tag":"service","restart":"on-failure","max_restarts":5}}`},
		{"request proc_attach", &Request{V: 1, Op: OpProcAttach, Proc: &ProcRequest{ID: "3", Follow: true}},
			`{"v":1,"op":"proc_attach","proc":{"id":"3","follow":true}}`},
		{"request proc_signal", &Request{V: 1, Op: OpProcSignal, Proc: &ProcRequest{ID: "web", Signal: "SIGKILL", Stop: true}},
			`{"v":1,"op":"proc_signal","proc":{"id":"web","signal":"SIGKILL","stop":true}}`},
		{"ping result boot", &PingResult{Version: "v", PID: 1, UptimeNS: 2, Boot: "ab12"},
			`{"version":"v","pid":1,"uptime_ns":2,"boot":"ab12"}`},
		{"proc info", &ProcInfo{ID: "1", Tag: "web", Argv: []string{"a"}, TTY: true, PID: 9, Started: mtime, State: ProcExited,
			Exit: &Exit{Code: 3}, Restart: RestartAlways, Restarts: 2},
			`{"id":"1","tag":"web","argv":["a"],"tty":true,"pid":9,"started":"2024-05-06T07:08:09.123456789Z","state":"exited","exit":{"code":3,"timed_out":false,"oom_killed":false,"duration_ms":0},"restart":"always","restarts":2}`},
		{"proc list head", &ProcListHead{Boot: "ab", Count: 2}, `{"boot":"ab","count":2}`},
		{"gap", &Gap{Skipped: 10}, `{"skipped":10}`},
		{"file info", &FileInfo{Name: "b", Path: "/a/b", Size: 3, Mode: 0o644, ModTime: mtime},
			`{"name":"b","path":"/a/b","size":3,"mode":420,"mod_time":"2024-05-06T07:08:09.123456789Z","is_dir":false}`},
		{"file info dir", &FileInfo{Name: "a", Path: "/a", Mode: 0x80000000 | 0o755, ModTime: mtime.Truncate(time.Second), IsDir: true},
			`{"name":"a","path":"/a","size":0,"mode":2147484141,"mod_time":"2024-05-06T07:08:09Z","is_dir":true}`},
		{"file info symlink", &FileInfo{Name: "l", Path: "/l", Size: 1, Mode: 0x8000000 | 0o777, ModTime: mtime, Link: "t"},
			`{"name":"l","path":"/l","size":1,"mode":134218239,"mod_time":"2024-05-06T07:08:09.123456789Z","is_dir":false,"link":"t"}`},
		{"file info owner", &FileInfo{Name: "b", Path: "/b", Mode: 0o600, ModTime: mtime.Truncate(time.Second), UID: ptr[uint32](0), GID: ptr[uint32](1000)},
			`{"name":"b","path":"/b","size":0,"mode":384,"mod_time":"2024-05-06T07:08:09Z","is_dir":false,"uid":0,"gid":1000}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Errorf("encoded\n %s\nwant\n %s", b, tc.want)
			}
			// And the other way: what an agent of any version sends
			// decodes to the same message.
			got := reflect.New(reflect.TypeOf(tc.v).Elem())
			if err := json.Unmarshal([]byte(tc.want), got.Interface()); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Interface(), tc.v) {
				t.Errorf("decoded %+v, want %+v", got.Elem(), reflect.ValueOf(tc.v).Elem())
			}
		})
	}
}

// TestWireOps pins the operation names, error codes and frame types.
func TestWireOps(t *testing.T) {
	got := []string{OpPing, OpExec, OpStat, OpList, OpMkdir, OpRemove, OpReadFile, OpWriteFile, OpReadTar, OpWriteTar, OpQuiesce, OpDial}
	want := []string{"ping", "exec", "stat", "list", "mkdir", "remove", "read_file", "write_file", "read_tar", "write_tar", "quiesce", "dial"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ops = %q, want %q", got, want)
	}
	codes := []string{CodeInvalid, CodeNotFound, CodeConflict, CodeTooLarge, CodePermission, CodeUnreachable, CodeExhausted, CodeInternal}
	wantCodes := []string{"invalid_argument", "not_found", "conflict", "too_large", "permission_denied", "unreachable", "resource_exhausted", "internal"}
	if !reflect.DeepEqual(codes, wantCodes) {
		t.Errorf("error codes = %q, want %q", codes, wantCodes)
	}
	pops := []string{OpProcStart, OpProcList, OpProcAttach, OpProcStdin, OpProcSignal, OpProcWait}
	wantPops := []string{"proc_start", "proc_list", "proc_attach", "proc_stdin", "proc_signal", "proc_wait"}
	if !reflect.DeepEqual(pops, wantPops) {
		t.Errorf("process ops = %q, want %q", pops, wantPops)
	}
	frames := []FrameType{FrameStdin, FrameStdinEOF, FrameResize, FrameSignal, FrameStdout, FrameStderr, FrameExit, FrameError, FrameData, FrameEnd, FrameResult, FrameGap}
	for i, f := range frames {
		if int(f) != i+1 {
			t.Errorf("frame %s = %d, want %d", f, f, i+1)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestSafeMessage: text from the agent loses its control characters and
// invalid bytes (written out as escapes) and is cut at a rune boundary.
func TestSafeMessage(t *testing.T) {
	for in, want := range map[string]string{
		"no such file":       "no such file",
		"\x1b[2Jwiped":       `\x1b[2Jwiped`,
		"bell\x07 del\x7f":   `bell\x07 del\x7f`,
		"csi\u009b31m":       `csi\u009b31m`,
		"bad\xffbyte":        `bad\xffbyte`,
		"line\nbreak\r\ttab": `line\x0abreak\x0d\x09tab`,
		"sep\u2028x":         `sep\u2028x`,
		"héllo wörld ✓":      "héllo wörld ✓",
	} {
		if got := SafeMessage(in); got != want {
			t.Errorf("SafeMessage(%q) = %q, want %q", in, got, want)
		}
	}
	long := strings.Repeat("é", 1000) // 2000 bytes
	got := SafeMessage(long)
	if !utf8.ValidString(got) || len(got) > maxMessageBytes+3 || !strings.HasSuffix(got, "...") {
		t.Fatalf("a long message: %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	err := ErrorFromWire(Error{Code: CodeNotFound, Message: "\x1b]0;owned\x07"})
	if strings.ContainsAny(err.Error(), "\x1b\x07") {
		t.Fatalf("ErrorFromWire kept control bytes: %q", err)
	}
}
