package sudo

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// action is what a sudo command line asks for besides running a command.
type action int

const (
	actRun     action = iota
	actNothing        // -v, -k, -K alone: nothing to do without passwords
	actVersion        // -V
	actHelp           // -h
	actList           // -l
)

// usage is sudo's help, limited to what this sudo does.
const usage = `usage: sudo [-EHiknSs] [-u user] [VAR=value] [command [arg ...]]
       sudo -v | -k | -K | -l | -V | -h

berth's sudo runs a command as root (or -u user) in this sandbox, without
a password; the sandbox's agent runs it with the sandbox's own limits.
  -E, --preserve-env[=LIST]  keep the environment (or the names in LIST)
  -u, --user=USER            run as USER instead of root
  -i, --login                run the user's shell as a login shell
  -s, --shell                run $SHELL (or the user's shell)
  -n, -S, -H, -k, -K, -v     accepted (no password is ever asked)
`

// errUsage is a command line sudo does not take; its message names why.
type errUsage struct{ msg string }

func (e errUsage) Error() string { return e.msg }

// ParseArgs reads sudo's command line (without the program name) into a
// request (Env, Cwd left for the caller) and what else it asks for.
func ParseArgs(args []string) (*Request, action, error) {
	r := &Request{}
	act := actRun
	i := 0
	needArg := func(opt string) (string, error) {
		if i+1 >= len(args) {
			return "", errUsage{"option requires an argument -- '" + opt + "'"}
		}
		i++
		return args[i], nil
	}
options:
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			i++
			break options
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			switch name {
			case "preserve-env":
				if hasVal {
					r.PreserveList = append(r.PreserveList, splitList(val)...)
				} else {
					r.PreserveEnv = true
				}
			case "user":
				if !hasVal {
					v, err := needArg(name)
					if err != nil {
						return nil, 0, err
					}
					val = v
				}
				r.User = val
			case "login":
				r.Login = true
			case "shell":
				r.Shell = true
			case "non-interactive", "stdin", "set-home", "reset-timestamp", "remove-timestamp":
			case "validate":
				act = max(act, actNothing)
			case "list":
				act = actList
			case "version":
				act = actVersion
			case "help":
				act = actHelp
			case "prompt":
				if !hasVal {
					if _, err := needArg(name); err != nil {
						return nil, 0, err
					}
				}
			default:
				return nil, 0, errUsage{fmt.Sprintf("option --%s is not supported by berth's sudo", name)}
			}
		case strings.HasPrefix(a, "-") && len(a) > 1:
			for j := 1; j < len(a); j++ {
				c := a[j]
				rest := a[j+1:]
				switch c {
				case 'E':
					r.PreserveEnv = true
				case 'i':
					r.Login = true
				case 's':
					r.Shell = true
				case 'n', 'S', 'H', 'k', 'K':
				case 'v':
					act = max(act, actNothing)
				case 'l':
					act = actList
				case 'V':
					act = actVersion
				case 'h':
					act = actHelp
				case 'u', 'p':
					val := rest
					if val == "" {
						v, err := needArg(string(c))
						if err != nil {
							return nil, 0, err
						}
						val = v
					}
					if c == 'u' {
						r.User = val
					}
					j = len(a) // the value took the rest
				default:
					return nil, 0, errUsage{fmt.Sprintf("option -%c is not supported by berth's sudo", c)}
				}
			}
		default:
			break options
		}
	}
	// VAR=value before the command.
	for ; i < len(args); i++ {
		k, _, ok := strings.Cut(args[i], "=")
		if !ok || k == "" || !isName(k) {
			break
		}
		r.Set = append(r.Set, args[i])
	}
	r.Argv = args[i:]
	if r.Login && r.Shell {
		return nil, 0, errUsage{"you may not specify both the -i and -s options"}
	}
	if act == actRun && len(r.Argv) == 0 && !r.Login && !r.Shell {
		if len(r.Set) > 0 || len(args) > 0 && (args[len(args)-1] == "-k" || args[len(args)-1] == "-K") {
			act = actNothing
		} else {
			return nil, actHelp, errUsage{"a command is required"}
		}
	}
	return r, act, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// isName reports whether k is a shell variable name.
func isName(k string) bool {
	for i, c := range k {
		if c != '_' && !(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && (i == 0 || !(c >= '0' && c <= '9')) {
			return false
		}
	}
	return true
}

// forwardedSignals are relayed to the command: it runs in its own
// session, so the terminal's signals reach the sudo program only.
var forwardedSignals = []os.Signal{unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT,
	unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH, unix.SIGALRM, unix.SIGCONT}

// Main is the sudo program: the agent's binary run under the name sudo.
// It returns the exit code: the command's, 1 for sudo's own failures.
func Main(args []string) int {
	req, act, err := ParseArgs(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sudo: %v\n", err)
		if act == actHelp {
			os.Stderr.WriteString(usage)
		}
		return 1
	}
	switch act {
	case actNothing:
		return 0
	case actVersion:
		os.Stdout.WriteString("Sudo version 1.9 (berth: commands run as the sandbox's root by its agent)\n")
		return 0
	case actHelp:
		os.Stdout.WriteString(usage)
		return 0
	case actList:
		os.Stdout.WriteString("User may run the following commands in this sandbox:\n    (ALL : ALL) NOPASSWD: ALL\n")
		return 0
	}
	req.Env = os.Environ()
	if req.Cwd, err = os.Getwd(); err != nil {
		req.Cwd = "/"
	}
	exit, err := Run(req)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sudo: %v\n", err)
		return 1
	}
	if exit.Signal > 0 {
		sig := unix.Signal(exit.Signal)
		// End as the command ended, as sudo does.
		signal.Reset(sig)
		unix.Kill(os.Getpid(), sig)
		time.Sleep(10 * time.Millisecond)
		return 128 + exit.Signal
	}
	return exit.Code
}

// Run sends req with this process's stdin, stdout and stderr to the
// agent, relays signals while the command runs, and returns how it ended.
func Run(req *Request) (Exit, error) {
	body, err := encodeBody(req)
	if err != nil {
		return Exit{}, err
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: Socket, Net: "unix"})
	if err != nil {
		if errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.ENOENT) {
			return Exit{}, errors.New("this sandbox offers no sudo (it was created without it); run the command as root through the API instead")
		}
		return Exit{}, err
	}
	defer c.Close()
	if err := peerIsAgent(c); err != nil {
		return Exit{}, err
	}
	sigc := make(chan os.Signal, 16)
	signal.Notify(sigc, forwardedSignals...)
	defer signal.Stop(sigc)
	if err := Send(c, body, stdio()); err != nil {
		// Refused before the request was read: the reason is waiting.
		c.SetReadDeadline(time.Now().Add(time.Second))
		if _, rerr := readAnswer(c); errors.As(rerr, new(refusal)) {
			return Exit{}, rerr
		}
		return Exit{}, fmt.Errorf("sending the request to the agent: %w", err)
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case s := <-sigc:
				c.Write([]byte{frameSignal, byte(s.(unix.Signal))})
			case <-done:
				return
			}
		}
	}()
	return readAnswer(c)
}

// stdio is this process's stdin, stdout and stderr, /dev/null in place of
// one that is closed (`sudo cmd <&-`), as the command's would be.
func stdio() []int {
	fds := []int{0, 1, 2}
	for i, fd := range fds {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == unix.EBADF {
			if n, err := unix.Open(os.DevNull, unix.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
				fds[i] = n
			}
		}
	}
	return fds
}

// Send writes a request: the header with fds attached, then the body.
func Send(c *net.UnixConn, body []byte, fds []int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.WriteMsgUnix(EncodeHeader(len(body)), oob, nil); err != nil {
		return err
	}
	_, err := c.Write(body)
	return err
}

// peerIsAgent checks that the socket's listener is PID 1, root: the
// agent. Anything else (a process that bound the name where the agent
// did not) would receive this process's descriptors.
func peerIsAgent(c *net.UnixConn) error {
	cred, err := peerCred(c)
	if err != nil {
		return err
	}
	if cred.Pid != 1 || cred.Uid != 0 {
		return fmt.Errorf("the sudo socket is served by pid %d uid %d, not the sandbox's agent: refusing to use it", cred.Pid, cred.Uid)
	}
	return nil
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
}

// PeerCred is the kernel's word on who is at the other end of c.
func PeerCred(c *net.UnixConn) (*unix.Ucred, error) { return peerCred(c) }
