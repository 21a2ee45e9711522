package sudo

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want Request
		act  action
		err  string
	}{
		{args: []string{"echo", "hi"}, want: Request{Argv: []string{"echo", "hi"}}},
		{args: []string{"-E", "env"}, want: Request{Argv: []string{"env"}, PreserveEnv: true}},
		{args: []string{"--preserve-env", "env"}, want: Request{Argv: []string{"env"}, PreserveEnv: true}},
		{args: []string{"--preserve-env=A,B", "env"}, want: Request{Argv: []string{"env"}, PreserveList: []string{"A", "B"}}},
		{args: []string{"-u", "user", "id"}, want: Request{Argv: []string{"id"}, User: "user"}},
		{args: []string{"-uuser", "id"}, want: Request{Argv: []string{"id"}, User: "user"}},
		{args: []string{"--user=user", "id"}, want: Request{Argv: []string{"id"}, User: "user"}},
		{args: []string{"--user", "user", "id"}, want: Request{Argv: []string{"id"}, User: "user"}},
		{args: []string{"-nE", "-u", "root", "--", "-x"}, want: Request{Argv: []string{"-x"}, User: "root", PreserveEnv: true}},
		{args: []string{"-n", "sh", "-c", "echo $0"}, want: Request{Argv: []string{"sh", "-c", "echo $0"}}},
		{args: []string{"-p", "", "true"}, want: Request{Argv: []string{"true"}}},
		{args: []string{"FOO=1", "BAR=2", "env", "X=3"}, want: Request{Argv: []string{"env", "X=3"}, Set: []string{"FOO=1", "BAR=2"}}},
		{args: []string{"-i"}, want: Request{Argv: []string{}, Login: true}},
		{args: []string{"-s", "ls", "a b"}, want: Request{Argv: []string{"ls", "a b"}, Shell: true}},
		{args: []string{"-v"}, act: actNothing},
		{args: []string{"-k"}, act: actNothing},
		{args: []string{"-V"}, act: actVersion},
		{args: []string{"-l"}, act: actList},
		{args: []string{"-h"}, act: actHelp},
		{args: nil, err: "a command is required"},
		{args: []string{"-E"}, err: "a command is required"},
		{args: []string{"-u"}, err: "requires an argument"},
		{args: []string{"-g", "wheel", "id"}, err: "-g is not supported"},
		{args: []string{"-b", "sleep"}, err: "-b is not supported"},
		{args: []string{"--chroot=/x", "id"}, err: "--chroot is not supported"},
		{args: []string{"-i", "-s"}, err: "both the -i and -s"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r, act, err := ParseArgs(tc.args)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if act != tc.act {
				t.Fatalf("action %d, want %d", act, tc.act)
			}
			if act != actRun {
				return
			}
			if tc.want.Argv == nil {
				tc.want.Argv = []string{}
			}
			if r.Argv == nil {
				r.Argv = []string{}
			}
			got, _ := json.Marshal(r)
			want, _ := json.Marshal(&tc.want)
			if !bytes.Equal(got, want) {
				t.Fatalf("got %s\nwant %s", got, want)
			}
		})
	}
}

func TestDecodeBodyBounds(t *testing.T) {
	ok := Request{Argv: []string{"id"}, Env: []string{"A=1"}, Cwd: "/"}
	body := func(mod func(*Request)) []byte {
		r := ok
		r.Argv = slices.Clone(ok.Argv)
		mod(&r)
		b, _ := json.Marshal(&r)
		return b
	}
	if _, err := DecodeBody(body(func(*Request) {})); err != nil {
		t.Fatalf("a good request: %v", err)
	}
	many := make([]string, MaxArgs+1)
	for i := range many {
		many[i] = "x"
	}
	for name, tc := range map[string]struct {
		b   []byte
		cat error
	}{
		"not json":       {[]byte("{"), errdefs.ErrInvalid},
		"two objects":    {append(body(func(*Request) {}), []byte(`{}`)...), errdefs.ErrInvalid},
		"unknown field":  {[]byte(`{"argv":["id"],"cwd":"/","uid":0}`), errdefs.ErrInvalid},
		"no command":     {body(func(r *Request) { r.Argv = nil }), errdefs.ErrInvalid},
		"empty argv0":    {body(func(r *Request) { r.Argv = []string{""} }), errdefs.ErrInvalid},
		"too many args":  {body(func(r *Request) { r.Argv = many }), errdefs.ErrTooLarge},
		"too many env":   {body(func(r *Request) { r.Env = many }), errdefs.ErrTooLarge},
		"huge arg":       {body(func(r *Request) { r.Argv = []string{strings.Repeat("a", MaxString+1)} }), errdefs.ErrTooLarge},
		"NUL in arg":     {body(func(r *Request) { r.Argv = []string{"id\x00x"} }), errdefs.ErrInvalid},
		"env not KV":     {body(func(r *Request) { r.Env = []string{"novalue"} }), errdefs.ErrInvalid},
		"set not KV":     {body(func(r *Request) { r.Set = []string{"=x"} }), errdefs.ErrInvalid},
		"relative cwd":   {body(func(r *Request) { r.Cwd = "tmp" }), errdefs.ErrInvalid},
		"no cwd":         {body(func(r *Request) { r.Cwd = "" }), errdefs.ErrInvalid},
		"long user":      {body(func(r *Request) { r.User = strings.Repeat("u", MaxUser+1) }), errdefs.ErrTooLarge},
		"bad keep":       {body(func(r *Request) { r.PreserveList = []string{"A=B"} }), errdefs.ErrInvalid},
		"over the bound": {make([]byte, MaxRequest+1), errdefs.ErrTooLarge},
	} {
		if _, err := DecodeBody(tc.b); !errors.Is(err, tc.cat) {
			t.Errorf("%s: %v, want %v", name, err, tc.cat)
		}
	}
	for name, h := range map[string][]byte{
		"short":      []byte("BSU1"),
		"magic":      EncodeHeader(10)[:0:0],
		"zero":       EncodeHeader(0),
		"over":       EncodeHeader(MaxRequest + 1),
		"other kind": append([]byte("BSU2"), EncodeHeader(10)[4:]...),
	} {
		if _, err := ParseHeader(h); err == nil {
			t.Errorf("header %s accepted", name)
		}
	}
}

// FuzzDecodeBody: whatever a caller sends, the parser answers a request
// within the bounds or an error of a stable category, and never panics.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range []string{
		`{"argv":["echo","hi"],"env":["A=1"],"cwd":"/home/user"}`,
		`{"argv":["env"],"env":[],"cwd":"/","preserve_env":true,"set":["X=1"]}`,
		`{"argv":[],"env":[],"cwd":"/","login":true,"user":"user"}`,
		`{"argv":["id"],"cwd":"/","preserve_list":["A","B"],"shell":true}`,
		`{"argv":["\u0000"],"cwd":"/"}`,
		`{"argv":["a"],"cwd":"rel"}`,
		`[]`, `{}`, `null`, `{"argv":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeBody(b)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) && !errors.Is(err, errdefs.ErrTooLarge) {
				t.Fatalf("error of no category: %v", err)
			}
			return
		}
		if len(r.Argv) == 0 && !r.Login && !r.Shell || len(r.Argv) > MaxArgs || len(r.Env)+len(r.Set) > MaxEnv ||
			!strings.HasPrefix(r.Cwd, "/") || len(r.User) > MaxUser {
			t.Fatalf("accepted out of bounds: %+v", r)
		}
		for _, s := range append(append(slices.Clone(r.Argv), r.Env...), r.Cwd, r.User) {
			if strings.IndexByte(s, 0) >= 0 {
				t.Fatalf("accepted a NUL byte: %q", s)
			}
		}
		// What is accepted encodes back to what a client would send.
		if _, err := encodeBody(r); err != nil {
			t.Fatalf("accepted but not encodable: %v", err)
		}
	})
}

// pair is a connected unix stream pair: the caller's end and the helper's.
func pair(t *testing.T) (caller, helper *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	caller, helper = conn(fds[0]), conn(fds[1])
	t.Cleanup(func() { caller.Close(); helper.Close() })
	return caller, helper
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// ReadRequest takes exactly three descriptors with the header, and keeps
// none of a request it refuses.
func TestReadRequestDescriptors(t *testing.T) {
	body, err := encodeBody(&Request{Argv: []string{"id"}, Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	n := int(null.Fd())
	for _, tc := range []struct {
		name string
		send func(c *net.UnixConn) error
		ok   bool
	}{
		{"three", func(c *net.UnixConn) error { return Send(c, body, []int{n, n, n}) }, true},
		{"none", func(c *net.UnixConn) error { return Send(c, body, nil) }, false},
		{"two", func(c *net.UnixConn) error { return Send(c, body, []int{n, n}) }, false},
		{"four", func(c *net.UnixConn) error { return Send(c, body, []int{n, n, n, n}) }, false},
		{"two hundred", func(c *net.UnixConn) error {
			fds := make([]int, 200)
			for i := range fds {
				fds[i] = n
			}
			return Send(c, body, fds)
		}, false},
		{"three after the header", func(c *net.UnixConn) error {
			if _, err := c.Write(EncodeHeader(len(body))); err != nil {
				return err
			}
			_, _, err := c.WriteMsgUnix(body, unix.UnixRights(n, n, n), nil)
			return err
		}, false},
		{"huge length", func(c *net.UnixConn) error {
			_, _, err := c.WriteMsgUnix(EncodeHeader(MaxRequest+1), unix.UnixRights(n, n, n), nil)
			return err
		}, false},
		{"garbage", func(c *net.UnixConn) error {
			_, _, err := c.WriteMsgUnix([]byte("GET / HTTP/1.1\r\n\r\n"), unix.UnixRights(n, n, n), nil)
			return err
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			caller, helper := pair(t)
			before := openFDs(t)
			if err := tc.send(caller); err != nil {
				t.Fatal(err)
			}
			caller.CloseWrite()
			req, fds, err := ReadRequest(helper)
			if tc.ok {
				if err != nil || len(fds) != NumFDs || req.Argv[0] != "id" {
					t.Fatalf("%v %v %+v", err, fds, req)
				}
				closeFDs(fds)
			} else if err == nil {
				closeFDs(fds)
				t.Fatalf("accepted: %+v with %d descriptors", req, len(fds))
			}
			// Drop what the kernel still queues (descriptors sent with
			// the body), then count: nothing received is kept.
			helper.Close()
			caller.Close()
			if after := openFDs(t); after > before-2 {
				t.Fatalf("descriptors open: %d before, %d after closing the pair", before, after)
			}
		})
	}
}

func TestEnvPolicy(t *testing.T) {
	pw := passwdEntry{name: "root", home: "/root", shell: "/bin/bash"}
	caller := &unix.Ucred{Uid: 1000, Gid: 1000}
	get := func(env []string, k string) (string, bool) {
		for _, kv := range env {
			if kk, v, _ := strings.Cut(kv, "="); kk == k {
				return v, true
			}
		}
		return "", false
	}
	in := []string{"FOO=bar", "TERM=xterm", "LC_ALL=C", "HOME=/home/user", "PATH=/evil", "SUDO_UID=0", "LD_PRELOAD=/x.so"}
	reset := buildEnv(&Request{Argv: []string{"env"}, Env: in, Set: []string{"X=1"}}, pw, caller, "user")
	for k, want := range map[string]string{"TERM": "xterm", "LC_ALL": "C", "HOME": "/root", "PATH": SecurePath,
		"SUDO_UID": "1000", "SUDO_USER": "user", "USER": "root", "SHELL": "/bin/bash", "X": "1", "SUDO_COMMAND": "env"} {
		if v, _ := get(reset, k); v != want {
			t.Errorf("reset %s=%q, want %q", k, v, want)
		}
	}
	for _, k := range []string{"FOO", "LD_PRELOAD"} {
		if _, ok := get(reset, k); ok {
			t.Errorf("reset kept %s", k)
		}
	}
	kept := buildEnv(&Request{Argv: []string{"env"}, Env: in, PreserveEnv: true}, pw, caller, "user")
	for k, want := range map[string]string{"FOO": "bar", "HOME": "/home/user", "PATH": SecurePath, "SUDO_UID": "1000"} {
		if v, _ := get(kept, k); v != want {
			t.Errorf("-E %s=%q, want %q", k, v, want)
		}
	}
	if got := shellJoin([]string{"echo", "a b", "$X;y"}); got != `echo a\ b $X\;y` {
		t.Errorf("shellJoin: %q", got)
	}
}
