package kubeenv

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Binaries names the executables a cluster runs.
type Binaries struct {
	Dir string // scripts/k8s-tools.sh's bin dir

	Etcd, APIServer, Kubelet, Scheduler, ControllerManager, KubeProxy, Kwok string
}

// cacheRoot is scripts/k8s-tools.sh's default cache ($BERTH_K8S_CACHE).
const cacheRoot = "/var/cache/berth/k8s"

// FindBinaries locates the binaries scripts/k8s-tools.sh built: in
// $BERTH_K8S_BIN if set, else in the dir named by <cache>/CURRENT.
func FindBinaries() (Binaries, error) {
	dir := os.Getenv("BERTH_K8S_BIN")
	if dir == "" {
		root := os.Getenv("BERTH_K8S_CACHE")
		if root == "" {
			root = cacheRoot
		}
		b, err := os.ReadFile(filepath.Join(root, "CURRENT"))
		if err != nil {
			return Binaries{}, fmt.Errorf("kubeenv: no Kubernetes binaries (%v): build them with scripts/k8s-tools.sh "+
				"(make test-k8s runs it; about 15 minutes on 2 cores the first time, cached after)", err)
		}
		dir = strings.TrimSpace(string(b))
	}
	bs := Binaries{
		Dir:               dir,
		Etcd:              filepath.Join(dir, "etcd"),
		APIServer:         filepath.Join(dir, "kube-apiserver"),
		Kubelet:           filepath.Join(dir, "kubelet"),
		Scheduler:         filepath.Join(dir, "kube-scheduler"),
		ControllerManager: filepath.Join(dir, "kube-controller-manager"),
		KubeProxy:         filepath.Join(dir, "kube-proxy"),
		Kwok:              filepath.Join(dir, "kwok"),
	}
	for _, p := range []string{bs.Etcd, bs.APIServer, bs.Kubelet, bs.Scheduler, bs.ControllerManager, bs.KubeProxy, bs.Kwok} {
		if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
			return Binaries{}, fmt.Errorf("kubeenv: %s is missing or not executable: rebuild with scripts/k8s-tools.sh", p)
		}
	}
	return bs, nil
}

// proc is one process the cluster started, with its log file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// start runs bin with args, its output in <logDir>/<name>.log, in a
// process group of its own (so a stop reaches what it forks by pid, never
// by name).
func start(logDir, name, bin string, args ...string) (*proc, error) {
	return startEnv(logDir, name, bin, nil, args...)
}

// startEnv is start with env added to this process's environment.
func startEnv(logDir, name, bin string, env []string, args ...string) (*proc, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process is gone (with its error).
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process (by pid), waits up to grace, then
// SIGKILLs it and what is left of its process group.
func (p *proc) stop(grace time.Duration) {
	if p == nil {
		return
	}
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-p.done
	}
	// Children it forked into its group (none expected) go too.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// tail is the last n lines of the process's log, for a failure message.
func (p *proc) tail(n int) string {
	return tailFile(p.log, n)
}

func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// freePorts returns n distinct free TCP ports on 127.0.0.1, held open
// together so they differ (another process may still take one before it is
// used: a start then fails loudly, it does not cross clusters).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitFor polls cond every 100ms until it returns true or an error, or
// timeout passes; a process of procs exiting meanwhile fails it at once.
func waitFor(timeout time.Duration, what string, cond func() (bool, error), procs ...*proc) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		for _, p := range procs {
			if done, perr := p.exited(); done {
				return fmt.Errorf("%s exited (%v) while waiting for %s; its log ends:\n%s", p.name, perr, what, p.tail(30))
			}
		}
		if time.Now().After(deadline) {
			if last == nil {
				last = errors.New("timed out")
			}
			return fmt.Errorf("waiting %v for %s: %w", timeout, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fatalf fails t with a message and the named logs' tails.
func fatalf(t testing.TB, procs []*proc, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	for _, p := range procs {
		if p != nil {
			msg += "\n--- " + p.name + " log (" + p.log + ") ---\n" + p.tail(20)
		}
	}
	t.Fatal(msg)
}

// pidsIn reads the pids listed in a cgroup.procs file.
func pidsIn(path string) []int {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []int
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}
