package sudo

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/agent/rootfs"
	"github.com/berth-sh/berth/internal/errdefs"
)

// HelperVerb is the agent binary's verb for the helper the agent starts
// for each accepted connection: `berth-agent agent-sudo-helper USER`,
// the connection as fd 3.
const HelperVerb = "agent-sudo-helper"

// requestTimeout bounds how long a caller may take to send its request.
const requestTimeout = 10 * time.Second

func encodeBody(r *Request) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxRequest {
		return nil, errdefs.TooLarge("the command and environment take %d bytes (at most %d)", len(b), MaxRequest)
	}
	return b, nil
}

// Allowed reports whether uid may use sudo in a sandbox whose sudo user
// is user: root, and that user.
func Allowed(root *rootfs.Root, user string, uid uint32) bool {
	if uid == 0 {
		return true
	}
	cred, err := root.ResolveUser(user)
	return err == nil && cred != nil && cred.Uid == uid
}

// HelperMain is the helper: it serves the one connection on fd 3 and
// returns its exit code (nobody reads it: the caller hears the answer on
// the connection). args is the sudo user (Allowed).
//
// It runs as the sandbox's root with the agent's own limits (capabilities,
// seccomp, cgroup, no_new_privs), in a process of its own, so that what
// a caller sends is parsed by a process that holds nothing the caller
// could not get by a request the caller is allowed: the agent itself only
// accepts, and never reads a byte of it.
func HelperMain(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: "+HelperVerb+" USER (the connection as fd 3)")
		return 2
	}
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	// The command must not inherit the connection.
	unix.CloseOnExec(3)
	f := os.NewFile(3, "sudo-conn")
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return 1
	}
	c, ok := fc.(*net.UnixConn)
	if !ok {
		fc.Close()
		return 1
	}
	defer c.Close()
	root, err := rootfs.OpenRoot("/")
	if err != nil {
		return 1
	}
	defer root.Close()
	return serve(c, root, args[0])
}

// serve answers one connection: first who calls (the kernel's word),
// then the request, then the command's end.
func serve(c *net.UnixConn, root *rootfs.Root, sudoUser string) int {
	cred, err := PeerCred(c)
	if err != nil {
		return 1
	}
	if !Allowed(root, sudoUser, cred.Uid) {
		refuse(c, NotAllowed(cred.Uid, sudoUser))
		return 1
	}
	c.SetReadDeadline(time.Now().Add(requestTimeout))
	req, fds, err := ReadRequest(c)
	if err != nil {
		refuse(c, err.Error())
		return 1
	}
	c.SetReadDeadline(time.Time{})
	defer closeFDs(fds)
	cmd, err := plan(root, req, cred)
	if err != nil {
		refuse(c, err.Error())
		return 1
	}
	cmd.attr.Files = []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])}
	pid, err := syscall.ForkExec(cmd.path, cmd.argv, cmd.attr)
	closeFDs(fds)
	fds = nil
	if err != nil {
		refuse(c, startError(cmd.argv[0], err))
		return 1
	}
	// The caller's signals go to the command's group until it is reaped
	// (its group id cannot be reused before that); a caller gone before
	// the command ended takes the command with it, as a killed exec does.
	var mu sync.Mutex
	reaped := false
	kill := func(sig unix.Signal) {
		mu.Lock()
		defer mu.Unlock()
		if !reaped {
			unix.Kill(-pid, sig)
		}
	}
	go func() {
		var b [2]byte
		for {
			if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != frameSignal {
				kill(unix.SIGKILL)
				return
			}
			if s := unix.Signal(b[1]); slices.Contains(forwardedSignals, os.Signal(s)) {
				kill(s)
			}
		}
	}()
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if err != unix.EINTR {
			break
		}
	}
	mu.Lock()
	reaped = true
	mu.Unlock()
	exit := Exit{Code: ws.ExitStatus()}
	if ws.Signaled() {
		exit = Exit{Code: 128 + int(ws.Signal()), Signal: int(ws.Signal())}
	}
	if err := writeExit(c, exit); err != nil {
		return 1
	}
	return 0
}

// NotAllowed is the refusal of a caller whose uid may not use sudo.
func NotAllowed(uid uint32, sudoUser string) string {
	return fmt.Sprintf("uid %d may not use sudo in this sandbox (root and its user %s may)", uid, sudoUser)
}

// Refuse tells the caller why nothing runs (sudo prints it on stderr).
func Refuse(c io.Writer, msg string) { refuse(c, msg) }

// refuse tells the caller why nothing runs (sudo prints it on stderr).
func refuse(c io.Writer, msg string) {
	_ = writeFrame(c, frameError, []byte(msg))
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// ReadRequest reads a request and the descriptors that come with its
// header: exactly NumFDs of them, or none is kept and it is refused.
// Descriptors sent later with the body are dropped by the kernel (a
// plain read takes no control data).
func ReadRequest(c *net.UnixConn) (*Request, []int, error) {
	h := make([]byte, headerLen)
	oob := make([]byte, unix.CmsgSpace(4*(NumFDs+1)))
	var fds []int
	bad := false
	got := 0
	for got < headerLen {
		n, oobn, flags, _, err := c.ReadMsgUnix(h[got:], oob)
		if oobn > 0 {
			more, perr := parseRights(oob[:oobn])
			fds = append(fds, more...)
			bad = bad || perr != nil
		}
		if flags&unix.MSG_CTRUNC != 0 {
			bad = true // more descriptors than room: the kernel dropped some
		}
		if err != nil {
			closeFDs(fds)
			return nil, nil, errdefs.Invalid("reading the request: %v", err)
		}
		if n == 0 {
			closeFDs(fds)
			return nil, nil, errdefs.Invalid("reading the request: connection closed")
		}
		got += n
	}
	if bad || len(fds) != NumFDs {
		closeFDs(fds)
		return nil, nil, errdefs.Invalid("a request carries exactly %d descriptors (stdin, stdout, stderr), not %d", NumFDs, len(fds))
	}
	n, err := ParseHeader(h)
	if err != nil {
		closeFDs(fds)
		return nil, nil, err
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c, body); err != nil {
		closeFDs(fds)
		return nil, nil, errdefs.Invalid("reading the request: %v", err)
	}
	req, err := DecodeBody(body)
	if err != nil {
		closeFDs(fds)
		return nil, nil, err
	}
	return req, fds, nil
}

// parseRights returns the descriptors of SCM_RIGHTS messages in oob; any
// other control message is an error (its descriptors still returned, to
// be closed).
func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	var bad error
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			bad = err
			continue
		}
		fds = append(fds, got...)
	}
	return fds, bad
}

// command is what the helper starts.
type command struct {
	path string
	argv []string
	attr *syscall.ProcAttr
}

// passwdEntry is a target's account: its name, home and shell.
type passwdEntry struct{ name, home, shell string }

// plan applies the policy to req from the caller cred: the target's
// credentials, the environment, the working directory, the program.
func plan(root *rootfs.Root, req *Request, caller *unix.Ucred) (*command, error) {
	target := req.User
	if target == "" {
		target = "root"
	}
	if strings.HasPrefix(target, "#") && isDigits(target[1:]) {
		target = target[1:] // sudo's -u '#uid'
	}
	if strings.Contains(target, ":") {
		return nil, errdefs.Invalid("unknown user %s", target)
	}
	cred, err := root.ResolveUser(target)
	if err != nil || cred == nil {
		return nil, errdefs.Invalid("unknown user %s", target)
	}
	pw := lookup(root, int(cred.Uid))
	if pw.name == "" {
		pw.name = strconv.Itoa(int(cred.Uid))
	}
	if pw.home == "" {
		pw.home = "/"
	}
	if pw.shell == "" {
		pw.shell = "/bin/sh"
	}
	env := buildEnv(req, pw, caller, lookup(root, int(caller.Uid)).name)

	dir := req.Cwd
	var argv []string
	switch {
	case req.Login:
		dir = pw.home
		argv = []string{"-" + path.Base(pw.shell)}
		if len(req.Argv) > 0 {
			argv = append(argv, "-c", shellJoin(req.Argv))
		}
	case req.Shell:
		sh := envValue(req.Env, "SHELL")
		if sh == "" {
			sh = pw.shell
		}
		argv = []string{sh}
		if len(req.Argv) > 0 {
			argv = append(argv, "-c", shellJoin(req.Argv))
		}
	default:
		argv = slices.Clone(req.Argv)
	}
	prog := argv[0]
	if req.Login {
		prog = pw.shell
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		if req.Login {
			dir = "/"
		} else {
			return nil, errdefs.Invalid("unable to change directory to %s", dir)
		}
	}
	p, err := lookPath(prog, dir)
	if err != nil {
		return nil, err
	}
	return &command{path: p, argv: argv, attr: &syscall.ProcAttr{Dir: dir, Env: env,
		Sys: &syscall.SysProcAttr{Setsid: true, Credential: cred}}}, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// lookup reads uid's account from the sandbox's /etc/passwd.
func lookup(root *rootfs.Root, uid int) passwdEntry {
	name, home, shell := root.Account(uid)
	return passwdEntry{name: name, home: home, shell: shell}
}

// keptNames are what an environment reset keeps of the caller's, as
// sudo's env_reset does; LC_* too.
var keptNames = []string{"TERM", "COLORTERM", "LANG", "LANGUAGE", "TZ", "DISPLAY", "XAUTHORITY",
	"LS_COLORS", "COLORS", "BERTH_SANDBOX_ID"}

// buildEnv is the command's environment: the caller's reset to keptNames
// (or kept whole with -E), the target's HOME, SHELL, USER and LOGNAME,
// SecurePath, SUDO_* from the kernel's word on the caller, then VAR=value
// of the command line.
func buildEnv(req *Request, pw passwdEntry, caller *unix.Ucred, callerName string) []string {
	env := map[string]string{}
	for _, kv := range req.Env {
		k, v, _ := strings.Cut(kv, "=")
		if req.PreserveEnv || slices.Contains(keptNames, k) || strings.HasPrefix(k, "LC_") || slices.Contains(req.PreserveList, k) {
			env[k] = v
		}
	}
	if _, ok := env["HOME"]; !ok || !req.PreserveEnv || req.Login {
		env["HOME"] = pw.home
	}
	env["PATH"] = SecurePath
	env["SHELL"] = pw.shell
	env["USER"], env["LOGNAME"] = pw.name, pw.name
	env["MAIL"] = "/var/mail/" + pw.name
	if callerName == "" {
		callerName = strconv.Itoa(int(caller.Uid))
	}
	env["SUDO_USER"] = callerName
	env["SUDO_UID"] = strconv.Itoa(int(caller.Uid))
	env["SUDO_GID"] = strconv.Itoa(int(caller.Gid))
	cmdline := strings.Join(req.Argv, " ")
	if len(cmdline) > 4096 {
		cmdline = cmdline[:4096]
	}
	env["SUDO_COMMAND"] = cmdline
	for _, kv := range req.Set {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range env {
			if !yield(k) {
				return
			}
		}
	}) {
		out = append(out, k+"="+env[k])
	}
	return out
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// shellJoin quotes argv for a shell's -c as sudo does for -i and -s:
// every character but letters, digits, '_', '-' and '$' escaped.
func shellJoin(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		for _, c := range a {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '$') {
				b.WriteByte('\\')
			}
			b.WriteRune(c)
		}
	}
	return b.String()
}

// lookPath finds file in SecurePath, as sudo's secure_path does; a name
// with a slash is taken as it is (relative to dir).
func lookPath(file, dir string) (string, error) {
	if strings.Contains(file, "/") {
		p := file
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			return "", errdefs.NotFound("%s: command not found", file)
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(SecurePath) {
		p := filepath.Join(d, file)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errdefs.NotFound("%s: command not found", file)
}

func startError(argv0 string, err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case unix.ENOENT:
			return argv0 + ": command not found"
		case unix.EACCES, unix.EPERM:
			return argv0 + ": permission denied"
		}
	}
	return fmt.Sprintf("unable to execute %s: %v", argv0, err)
}
