package bench

import (
	"context"

	"github.com/berth-sh/berth/client"
)

// Private is a private `berth serve` (its own data dir, socket, cgroup
// parent and runc root) for other packages that need one daemon of their
// own, as the bench does: the selftest (`berth selftest --private`).
type Private struct{ d *daemon }

// StartPrivate runs `<bin> serve --data-dir dataDir --socket
// dataDir/berth.sock [extra...]` and waits until it answers /healthz.
func StartPrivate(ctx context.Context, bin, dataDir string, extra ...string) (*Private, error) {
	return StartPrivateIn(ctx, bin, dataDir, "", extra...)
}

// StartPrivateIn is StartPrivate with the daemon in network namespace
// /var/run/netns/NETNS (nsenter --net: only its network namespace
// changes) when netns is not empty.
func StartPrivateIn(ctx context.Context, bin, dataDir, netns string, extra ...string) (*Private, error) {
	d, err := startDaemonIn(ctx, bin, dataDir, netns, extra...)
	if err != nil {
		return nil, err
	}
	return &Private{d: d}, nil
}

// Client is an SDK client on the daemon's unix socket (the host admin).
func (p *Private) Client() *client.Client { return p.d.c }

// Host is the daemon's unix socket as a BERTH_HOST value.
func (p *Private) Host() string { return p.d.host }

// PID is the daemon's process id.
func (p *Private) PID() int { return p.d.pid() }

// Stop sends SIGTERM and waits (SIGKILL after 30s).
func (p *Private) Stop() error { return p.d.stop() }

// LogTail is the end of the daemon's log.
func (p *Private) LogTail() string { return p.d.logTail() }
