package egress

// The egress proxy of secrets injected at egress (`--secret
// NAME=egress:HOST`): package egressproxy serves on the IPv4 gateway of
// the network at ProxyPort, started with the network and stopped with it;
// a sandbox with egress references is registered by its IPv4 address at
// attach and adopt (its own CA, kept in its host-side directory) and
// forgotten at detach.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/network"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/secrets/egressproxy"
)

// DefaultProxyPort is the egress proxy's port on the gateway.
const DefaultProxyPort = 15443

// CADir is the directory, in a sandbox's host-side directory
// (<data-dir>/sandboxes/<id>/, never mounted into the sandbox), that
// holds its egress CA; it goes with the sandbox's removal.
const CADir = "egress-ca"

// Secrets is what the proxy needs of the daemon: the value of a tenant's
// secret now, and the audit record of an injection (host and name, never
// the value).
type Secrets struct {
	Resolve func(ctx context.Context, tenant, name string) ([]byte, error)
	Audit   func(ctx context.Context, tenant, sandboxID, secret, host string)
}

type proxy struct {
	mu      sync.Mutex
	p       *egressproxy.Proxy
	ln      net.Listener
	done    chan struct{}
	secrets Secrets
	caMu    sync.Mutex
}

// SetSecrets installs the daemon's secrets for the proxy (before any
// sandbox is registered: the daemon calls it at assembly).
func (e *Net) SetSecrets(s Secrets) {
	e.px.mu.Lock()
	defer e.px.mu.Unlock()
	e.px.secrets = s
}

// startProxy listens on n's IPv4 gateway at ProxyPort and serves the
// proxy there. The network's nft rules accept that port only for
// connections DNATed to it.
func (e *Net) startProxy(n *network.Network) error {
	gw4, _ := n.Gateways()
	ln, err := net.Listen("tcp", net.JoinHostPort(gw4.String(), strconv.Itoa(int(e.cfg.ProxyPort))))
	if err != nil {
		return err
	}
	p := egressproxy.New(egressproxy.Config{Roots: e.cfg.Roots, Log: e.cfg.Logger.With("component", "egress-proxy")})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.Serve(ln); err != nil {
			e.cfg.Logger.Error("egress proxy stopped", "err", err)
		}
	}()
	e.px.mu.Lock()
	e.px.p, e.px.ln, e.px.done = p, ln, done
	e.px.mu.Unlock()
	return nil
}

func (e *Net) stopProxy() {
	e.px.mu.Lock()
	p, ln, done := e.px.p, e.px.ln, e.px.done
	e.px.p, e.px.ln, e.px.done = nil, nil, nil
	e.px.mu.Unlock()
	if p == nil {
		return
	}
	_ = ln.Close()
	p.Close()
	<-done
}

var (
	systemOnce sync.Once
	systemPEM  []byte
)

// SystemCABundle is the host's system CA bundle (the first of
// wire.SystemCABundles, read once; empty when none fits the bound), for
// sandboxes whose image has none.
func SystemCABundle() []byte {
	systemOnce.Do(func() {
		for _, p := range wire.SystemCABundles {
			if b, err := os.ReadFile(p); err == nil && len(b) > 0 && len(b) <= wire.MaxSystemCABytes {
				systemPEM = b
				return
			}
		}
	})
	return systemPEM
}

// redirectHosts are the hosts of sb's egress references.
func redirectHosts(sb *sandbox.Sandbox) []string {
	var out []string
	for _, r := range sb.Spec.Secrets {
		if r.Egress() {
			out = append(out, r.EgressHost)
		}
	}
	return out
}

func (e *Net) caDir(id string) string {
	return filepath.Join(e.cfg.DataDir, "sandboxes", id, CADir)
}

// CA returns sb's egress CA, made (and kept, key 0600) on first use.
func (e *Net) CA(sb *sandbox.Sandbox) (*egressproxy.CA, error) {
	e.px.caMu.Lock()
	defer e.px.caMu.Unlock()
	dir := e.caDir(sb.ID)
	ca, err := egressproxy.LoadCA(dir)
	if err == nil {
		return ca, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if ca, err = egressproxy.NewCA(sb.ID, time.Now()); err != nil {
		return nil, err
	}
	if err := ca.Save(dir); err != nil {
		return nil, err
	}
	return ca, nil
}

// register tells the proxy about sb (when it has egress references): its
// connections come from its IPv4 address.
func (e *Net) register(sb *sandbox.Sandbox) error {
	if !sb.Spec.HasEgressSecrets() {
		return nil
	}
	v4, err := netip.ParseAddr(sb.Spec.IPv4)
	if err != nil || !v4.Is4() {
		return fmt.Errorf("egress secrets: sandbox %s has no IPv4 address", sb.ID)
	}
	ca, err := e.CA(sb)
	if err != nil {
		return fmt.Errorf("egress CA of %s: %w", sb.ID, err)
	}
	e.px.mu.Lock()
	p := e.px.p
	e.px.mu.Unlock()
	if p == nil {
		return errors.New("egress proxy not running")
	}
	// The daemon's secrets are read at each use: sandboxes adopted at a
	// restart are registered before the daemon has opened its vault.
	secretsNow := func() Secrets {
		e.px.mu.Lock()
		defer e.px.mu.Unlock()
		return e.px.secrets
	}
	id, tenant := sb.ID, sb.Tenant
	box := &egressproxy.Sandbox{ID: id, CA: ca,
		Resolve: func(ctx context.Context, name string) ([]byte, error) {
			if s := secretsNow(); s.Resolve != nil {
				return s.Resolve(ctx, tenant, name)
			}
			return nil, errdefs.Unavailable("this daemon holds no secrets")
		},
		Pinned: func(host string, a netip.Addr) bool {
			n := e.Up()
			return n != nil && n.Pinned(id, host, a)
		},
		OnInject: func(secret, host string) {
			if s := secretsNow(); s.Audit != nil {
				s.Audit(context.Background(), tenant, id, secret, host)
			}
		},
	}
	for _, r := range sb.Spec.Secrets {
		if r.Egress() {
			box.Secrets = append(box.Secrets, egressproxy.Secret{Name: r.Name, Host: r.EgressHost, Placeholder: r.Placeholder})
		}
	}
	p.Add(v4, box)
	return nil
}

func (e *Net) unregister(sb *sandbox.Sandbox) {
	if !sb.Spec.HasEgressSecrets() {
		return
	}
	e.px.mu.Lock()
	p := e.px.p
	e.px.mu.Unlock()
	if v4, err := netip.ParseAddr(sb.Spec.IPv4); err == nil && p != nil {
		p.Remove(v4)
	}
}
