// Package peer is the raw runc peer of berth bench: the same runc binary
// given a bundle equivalent to a berth sandbox's, so that each figure of
// the report stands beside what runc alone costs in the same run.
package peer

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/engine/templates"
	"github.com/berth-sh/berth/internal/image"
	"github.com/berth-sh/berth/internal/node/local"
	"github.com/berth-sh/berth/internal/overlay"
	"github.com/berth-sh/berth/internal/runtime"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Peer is raw runc given an equivalent bundle to a berth sandbox's: the
// same runc binary, an overlay root over the daemon's base template layers,
// the host /usr bind, berth's spec (user namespace with the same id map,
// seccomp, capabilities, masked paths), the same resources and a cgroup
// under a bench-only parent.
type Peer struct {
	runc   string
	root   string // runc --root
	dir    string
	rootfs string
	parent string // cgroup parent, e.g. berth-bench-1a2b3c4d
	logf   string // runc's stderr
	base   *specs.Spec
	seq    atomic.Int64
}

// peerArgsTrue and peerArgsSleep are the init processes of the peer's
// one-shot and long-running containers.
var (
	peerArgsTrue  = []string{"/usr/bin/true"}
	peerArgsSleep = []string{"/usr/bin/sleep", "1000"}
)

// New sets up the peer in tmp/peer beside the daemon c talks to (its
// instance names the peer's cgroup parent): the overlay root over the
// daemon's base template layers and the base spec.
func New(ctx context.Context, runc, tmp string, c *client.Client, instance string) (*Peer, error) {
	tpl, err := c.GetTemplate(ctx, templates.BuiltinTemplate)
	if err != nil {
		return nil, fmt.Errorf("reading template %s: %w", templates.BuiltinTemplate, err)
	}
	if len(tpl.Layers) == 0 {
		return nil, fmt.Errorf("template %s has no layers", tpl.Name)
	}
	idmap := local.DefaultIDMap
	images, err := image.Open(filepath.Join(tmp, "images"),
		image.IDMap{HostUID: idmap.HostUID, HostGID: idmap.HostGID, Size: idmap.Size})
	if err != nil {
		return nil, err
	}
	// Lowers top first, as the manager mounts them.
	var lowers []string
	for i := len(tpl.Layers) - 1; i >= 0; i-- {
		if !images.HasLayer(tpl.Layers[i]) {
			images.Close()
			return nil, fmt.Errorf("layer %s is not in the daemon's image store", tpl.Layers[i])
		}
		lowers = append(lowers, images.LayerPath(tpl.Layers[i]))
	}
	images.Close()

	dir := filepath.Join(tmp, "peer")
	p := &Peer{
		runc:   runc,
		root:   filepath.Join(dir, "runc"),
		dir:    dir,
		rootfs: filepath.Join(dir, "rootfs"),
		parent: Parent(instance),
		logf:   filepath.Join(dir, "runc.log"),
	}
	upper, work := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	for _, dd := range []string{dir, upper, work, p.rootfs, filepath.Join(dir, "bundles")} {
		if err := os.MkdirAll(dd, 0o711); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(p.root, 0o700); err != nil {
		return nil, err
	}
	uid, gid := idmap.HostRoot()
	if err := os.Chown(upper, uid, gid); err != nil {
		return nil, err
	}
	if err := os.Chmod(upper, 0o755); err != nil {
		return nil, err
	}
	if err := overlay.Mount(lowers, upper, work, p.rootfs); err != nil {
		return nil, err
	}
	p.base, err = runtime.BuildSpec(&runtime.Spec{
		Rootfs:   p.rootfs,
		Hostname: "peer",
		Args:     peerArgsTrue,
		Env:      []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Mounts:   []runtime.Mount{{Source: "/usr", Destination: "/usr", ReadOnly: true}},
		// The same defaults a sandbox of the base template gets.
		Resources: sandbox.DefaultResources,
		IDMap:     idmap,
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Parent is the cgroup parent of the peer's containers, named after
// the daemon's instance: berth-bench-<hash>.
func Parent(instance string) string {
	return "berth-bench-" + strings.TrimPrefix(instance, "berth-")
}

// newID returns a fresh container id.
func (p *Peer) newID(kind string) string {
	return fmt.Sprintf("peer-%s-%d", kind, p.seq.Add(1))
}

// bundle writes the bundle of container id running args; it is the
// untimed preparation a caller does before `runc run`.
func (p *Peer) bundle(id string, args []string) (string, error) {
	return p.bundleSeccomp(id, args, true)
}

// bundleSeccomp is bundle, optionally without the seccomp profile.
func (p *Peer) bundleSeccomp(id string, args []string, withSeccomp bool) (string, error) {
	sp := *p.base
	proc := *sp.Process
	proc.Args = args
	sp.Process = &proc
	lin := *sp.Linux
	lin.CgroupsPath = "/" + p.parent + "/" + id
	if !withSeccomp {
		lin.Seccomp = nil
	}
	sp.Linux = &lin
	data, err := json.Marshal(&sp)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(p.dir, "bundles", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600)
}

// runc runs one runc command with stdin and stdout on /dev/null and stderr
// appended to the peer's log, and returns its wall time.
func (p *Peer) Cmd(ctx context.Context, args ...string) (time.Duration, error) {
	logf, err := os.OpenFile(p.logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	c := exec.CommandContext(ctx, p.runc, append([]string{"--root", p.root}, args...)...)
	c.Stderr = logf
	t0 := time.Now()
	err = c.Run()
	d := time.Since(t0)
	if err != nil {
		return d, fmt.Errorf("runc %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(runtime.TailFile(p.logf, 600)))
	}
	return d, nil
}

// RunTrue times `runc run` of true in the foreground (which includes runc's
// own teardown of the container), then deletes what is left, untimed.
func (p *Peer) RunTrue(ctx context.Context) (time.Duration, error) {
	return p.RunTrueSeccomp(ctx, true)
}

// RunTrueSeccomp is runTrue, optionally with the seccomp profile left out
// of the bundle.
func (p *Peer) RunTrueSeccomp(ctx context.Context, withSeccomp bool) (time.Duration, error) {
	id := p.newID("run")
	b, err := p.bundleSeccomp(id, peerArgsTrue, withSeccomp)
	if err != nil {
		return 0, err
	}
	d, err := p.Cmd(ctx, "run", "--bundle", b, id)
	_, derr := p.Cmd(context.WithoutCancel(ctx), "delete", "--force", id)
	if derr != nil && !strings.Contains(derr.Error(), "does not exist") && err == nil {
		err = derr
	}
	os.RemoveAll(b)
	return d, err
}

// StartSleep starts a detached container running sleep and returns its id
// and the wall time of `runc run -d`.
func (p *Peer) StartSleep(ctx context.Context) (string, time.Duration, error) {
	id := p.newID("idle")
	b, err := p.bundle(id, peerArgsSleep)
	if err != nil {
		return "", 0, err
	}
	d, err := p.Cmd(ctx, "run", "--detach", "--bundle", b, id)
	if err != nil {
		p.Remove(context.WithoutCancel(ctx), id)
		return "", 0, err
	}
	return id, d, nil
}

// ExecTrue times `runc exec <id> true`.
func (p *Peer) ExecTrue(ctx context.Context, id string) (time.Duration, error) {
	return p.Cmd(ctx, "exec", id, "/usr/bin/true")
}

// Remove force-deletes container id and its bundle and returns the wall
// time of `runc delete --force`.
func (p *Peer) Remove(ctx context.Context, id string) (time.Duration, error) {
	d, err := p.Cmd(ctx, "delete", "--force", id)
	os.RemoveAll(filepath.Join(p.dir, "bundles", id))
	return d, err
}

// CgroupRel is the cgroup of container id, relative to the hierarchy root.
func (p *Peer) CgroupRel(id string) string { return "/" + p.parent + "/" + id }

// List returns the ids of the peer's containers runc still knows.
func (p *Peer) List(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, p.runc, "--root", p.root, "list", "--quiet").Output()
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

// Rootfs is the overlay root every peer container shares.
func (p *Peer) Rootfs() string { return p.rootfs }
