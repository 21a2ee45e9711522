package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	gorunc "github.com/containerd/go-runc"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/cgroups"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/seccomp"
)

// Runc is the default runtime class: Debian's runc, driven through
// containerd's go-runc, with its state kept under its own root directory so
// that two daemons never see each other's containers.
type Runc struct {
	r           *gorunc.Runc
	cgroupCache sync.Map // container id -> cgroup path
	filters     sync.Map // sha256 of a seccomp profile's JSON -> *os.File (sealed memfd of its program)
	// name and iso are set for other OCI runtimes driven through the same
	// runc-compatible CLI (the microVM class); zero for runc itself.
	name string
	iso  *Isolation
}

// NewRunc returns the runc runtime class. binary is the runc executable
// (empty: "runc" from PATH); root is runc's state directory, private to
// this daemon.
func NewRunc(binary, root string) (*Runc, error) {
	if binary == "" {
		binary = "runc"
	}
	path, err := exec.LookPath(binary)
	if err != nil {
		return nil, fmt.Errorf("runc not found (%s): install it with `apt-get install runc`: %w", binary, err)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	return &Runc{r: &gorunc.Runc{Command: path, Root: root}}, nil
}

// Name implements Runtime.
func (rc *Runc) Name() string {
	if rc.name != "" {
		return rc.name
	}
	return "runc"
}

// Root returns runc's state directory.
func (rc *Runc) Root() string { return rc.r.Root }

// fileIO hands a log file to runc as the container's stdout and stderr and
// /dev/null as its stdin.
type fileIO struct{ f *os.File }

func (fileIO) Close() error             { return nil }
func (fileIO) Stdin() io.WriteCloser    { return nil }
func (fileIO) Stdout() io.ReadCloser    { return nil }
func (fileIO) Stderr() io.ReadCloser    { return nil }
func (f fileIO) Set(cmd *exec.Cmd)      { cmd.Stdout, cmd.Stderr = f.f, f.f }
func (f fileIO) CloseAfterStart() error { return nil }

var _ gorunc.IO = fileIO{}

// Start implements Runtime. It writes config.json into the bundle and runs
// the container detached; runc returns once init has been started.
func (rc *Runc) Start(ctx context.Context, s *Spec) (int, error) {
	spec, err := BuildSpec(s)
	if err != nil {
		return 0, err
	}
	extra := s.ExtraFiles
	if s.InitSeccompFD > 0 {
		if rc.name != "" {
			return 0, fmt.Errorf("%s: init cannot be handed a seccomp program; the guest applies the profile", rc.name)
		}
		if s.InitSeccompFD != 3+len(s.ExtraFiles) {
			return 0, fmt.Errorf("runc: seccomp descriptor %d does not follow the %d extra files", s.InitSeccompFD, len(s.ExtraFiles))
		}
		prog, err := rc.initSeccomp(spec.Linux.Seccomp)
		if err != nil {
			return 0, err
		}
		extra = append(append([]*os.File(nil), s.ExtraFiles...), prog)
		spec.Linux.Seccomp = nil
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(s.Bundle, 0o700); err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(s.Bundle, "config.json"), data, 0o600); err != nil {
		return 0, err
	}
	logf, err := logFile(s.Log)
	if err != nil {
		return 0, err
	}
	if logf != s.Log {
		defer logf.Close()
	}
	pidFile := filepath.Join(s.Bundle, "init.pid")
	_, err = rc.r.Run(ctx, s.ID, s.Bundle, &gorunc.CreateOpts{
		IO:      fileIO{logf},
		Detach:  true,
		PidFile: pidFile,
		// A new session keyring per container is charged to the owning
		// uid, and every sandbox's root is the same host uid: the kernel's
		// default quota (kernel.keys.maxkeys = 200) would cap a host at
		// about 200 sandboxes. Sandboxes cannot use keyrings anyway: the
		// seccomp profile denies keyctl, add_key and request_key.
		NoNewKeyring: true,
		ExtraFiles:   extra,
	})
	if err != nil {
		// What runc printed went to s.Log, whose reader adds it.
		return 0, fmt.Errorf("runc run %s: %w", s.ID, err)
	}
	pid, err := gorunc.ReadPidFile(pidFile)
	if err != nil {
		return 0, fmt.Errorf("runc run %s: reading pid file: %w", s.ID, err)
	}
	return pid, nil
}

// initSeccomp returns a sealed memfd holding profile compiled to BPF, for
// the sandbox's init to install (Spec.InitSeccompFD). Each distinct
// profile is compiled once per daemon; the file stays open for the
// daemon's life and is shared by every start (init reads it with pread).
func (rc *Runc) initSeccomp(profile *specs.LinuxSeccomp) (*os.File, error) {
	if profile == nil {
		return nil, errors.New("runc: no seccomp profile to hand to init")
	}
	key, err := json.Marshal(profile)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(key)
	if f, ok := rc.filters.Load(sum); ok {
		return f.(*os.File), nil
	}
	prog, err := seccomp.Compile(profile)
	if err != nil {
		return nil, fmt.Errorf("runc: compiling the seccomp profile: %w", err)
	}
	b, err := prog.MarshalBinary()
	if err != nil {
		return nil, err
	}
	f, err := sealedMemfd("berth-seccomp", b)
	if err != nil {
		return nil, err
	}
	if prev, loaded := rc.filters.LoadOrStore(sum, f); loaded {
		f.Close()
		return prev.(*os.File), nil
	}
	return f, nil
}

// sealedMemfd returns a memfd holding b, sealed against any change.
func sealedMemfd(name string, b []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, fmt.Errorf("memfd: %w", err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS,
		unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		f.Close()
		return nil, fmt.Errorf("memfd seals: %w", err)
	}
	return f, nil
}

// State implements Runtime.
func (rc *Runc) State(ctx context.Context, id string) (State, error) {
	// runc keeps each container's state in <root>/<id>; without it runc
	// knows no such container, and asking it would cost a process.
	if _, err := os.Stat(filepath.Join(rc.r.Root, id)); errors.Is(err, os.ErrNotExist) {
		return State{}, fmt.Errorf("runc container %s: %w", id, errdefs.ErrNotFound)
	}
	c, err := rc.r.State(ctx, id)
	if err != nil {
		if notExist(err) {
			return State{}, fmt.Errorf("runc container %s: %w", id, errdefs.ErrNotFound)
		}
		return State{}, fmt.Errorf("runc state %s: %w", id, err)
	}
	return State{ID: c.ID, Status: Status(c.Status), Pid: c.Pid, Bundle: c.Bundle}, nil
}

// List implements Runtime.
//
// runc 1.1's list fails whole when a container's directory goes (or comes)
// while it reads the root: a create or delete beside it. That is tried
// again a few times before it is an error (doctor reported it after a
// burst's teardown).
func (rc *Runc) List(ctx context.Context) ([]State, error) {
	var (
		cs  []*gorunc.Container
		err error
	)
	for attempt := 1; ; attempt++ {
		if cs, err = rc.r.List(ctx); err == nil || attempt == 5 || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt) * 20 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, fmt.Errorf("runc list: %w", err)
	}
	out := make([]State, 0, len(cs))
	for _, c := range cs {
		out = append(out, State{ID: c.ID, Status: Status(c.Status), Pid: c.Pid, Bundle: c.Bundle})
	}
	return out, nil
}

// Kill implements Runtime; it signals every process of the container.
func (rc *Runc) Kill(ctx context.Context, id string, sig syscall.Signal) error {
	err := rc.r.Kill(ctx, id, int(sig), &gorunc.KillOpts{All: true})
	if err != nil && (notExist(err) || notRunning(err)) {
		return nil
	}
	return err
}

// Delete implements Runtime. Callers that can should kill the
// container's processes first (cgroups.Destroy): `runc delete --force` on a
// running container waits in 100 ms steps for it to die.
func (rc *Runc) Delete(ctx context.Context, id string) error {
	if _, err := os.Stat(filepath.Join(rc.r.Root, id)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	err := rc.r.Delete(ctx, id, &gorunc.DeleteOpts{Force: true})
	if err != nil && notExist(err) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("runc delete %s: %w", id, err)
	}
	rc.cgroupCache.Delete(id)
	return nil
}

// Pause implements Runtime. It freezes the container's cgroup directly,
// which is all `runc pause` does (runc reads the freezer to report
// "paused"), without the cost of starting a runc process.
func (rc *Runc) Pause(ctx context.Context, id string) error {
	if rel, err := rc.cgroupPath(id); err == nil {
		return cgroups.Freeze(rel)
	}
	return rc.r.Pause(ctx, id)
}

// Resume implements Runtime.
func (rc *Runc) Resume(ctx context.Context, id string) error {
	if rel, err := rc.cgroupPath(id); err == nil {
		return cgroups.Thaw(rel)
	}
	return rc.r.Resume(ctx, id)
}

// cgroupPath reads the container's cgroup path from runc's state file.
func (rc *Runc) cgroupPath(id string) (string, error) {
	if v, ok := rc.cgroupCache.Load(id); ok {
		return v.(string), nil
	}
	b, err := os.ReadFile(filepath.Join(rc.r.Root, id, "state.json"))
	if err != nil {
		return "", err
	}
	var st struct {
		Config struct {
			Cgroups struct {
				Path string `json:"path"`
			} `json:"cgroups"`
		} `json:"config"`
	}
	if err := json.Unmarshal(b, &st); err != nil || st.Config.Cgroups.Path == "" {
		return "", fmt.Errorf("runc state of %s has no cgroup path", id)
	}
	rc.cgroupCache.Store(id, st.Config.Cgroups.Path)
	return st.Config.Cgroups.Path, nil
}

// Isolation implements Runtime.
func (rc *Runc) Isolation() Isolation {
	if rc.iso != nil {
		return *rc.iso
	}
	return Isolation{
		Runtime:       "runc",
		SharedKernel:  true,
		UserNamespace: true,
		Seccomp:       "docker-default",
		Capabilities:  capNames(),
		NoNewPrivs:    true,
		ReadonlyImage: true,
	}
}

func notExist(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "does not exist") ||
		errors.Is(err, os.ErrNotExist))
}

func notRunning(err error) bool {
	s := err.Error()
	return strings.Contains(s, "not running") || strings.Contains(s, "process already finished") ||
		strings.Contains(s, "container not running")
}

// logFile returns f, or /dev/null open for writing when f is nil.
func logFile(f *os.File) (*os.File, error) {
	if f != nil {
		return f, nil
	}
	return os.OpenFile(os.DevNull, os.O_WRONLY, 0)
}

// TailFile returns up to n bytes from the end of a file, for error messages
// (a sandbox init log, say).
func TailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := st.Size() - n
	if off < 0 {
		off = 0
	}
	buf := make([]byte, st.Size()-off)
	_, _ = f.ReadAt(buf, off)
	return string(buf)
}
