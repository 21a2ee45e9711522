package kube

// The channel to a pod's agent: its identity (a Secret per sandbox, made
// at the first Provision and kept until Remove), the client, and the
// refusals of listeners that are not that sandbox's agent.

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/agent/agenttls"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
)

// agentEntry is one sandbox's client and the TLS configuration of the
// identity it was made from.
type agentEntry struct {
	client *agent.Client
	// uid of the Secret the configuration came from: a Secret made anew
	// (after a Remove and a create with the same id) is a new identity.
	uid  string
	conf *tls.Config

	mu        sync.Mutex
	lastEvent time.Time
}

// agentIdleTimeout ends a file operation on which an agent has moved no
// byte for that long: the daemon's deadline, not the agent's.
const agentIdleTimeout = 30 * time.Second

// ensureIdentity makes sandbox id's identity Secret unless it exists.
func (b *Backend) ensureIdentity(ctx context.Context, id string) error {
	if _, err := b.secrets.Secrets(b.cfg.Namespace).Get(secretName(id)); err == nil {
		return nil
	}
	ident, err := agenttls.NewIdentity(id)
	if err != nil {
		return err
	}
	_, err = b.client.CoreV1().Secrets(b.cfg.Namespace).Create(ctx, b.secretFor(id, ident), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("agent identity: %w", err)
	}
	return nil
}

// identity reads sandbox id's identity Secret (the cache, else the API:
// one just made may not have reached the cache yet).
func (b *Backend) identity(ctx context.Context, id string) (*corev1.Secret, error) {
	s, err := b.secrets.Secrets(b.cfg.Namespace).Get(secretName(id))
	if err == nil {
		return s, nil
	}
	s, err = b.client.CoreV1().Secrets(b.cfg.Namespace).Get(ctx, secretName(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, errdefs.NotFound("sandbox %s has no agent identity (Secret %s)", id, secretName(id))
	}
	return s, err
}

// Agent returns the client of sb's agent.
func (b *Backend) Agent(sb *sandbox.Sandbox) *agent.Client { return b.agentFor(sb.ID).client }

func (b *Backend) agentFor(id string) *agentEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.agents[id]
	if !ok {
		e = &agentEntry{}
		d := &agent.TLSDialer{Addr: func(ctx context.Context) (string, error) { return b.agentAddr(id) },
			Refused: func(err error) { b.refuseAgent(id, e, err) }}
		e.client = agent.NewClientDialer(func(ctx context.Context) (net.Conn, error) {
			conf, err := b.tlsConfig(ctx, id, e)
			if err != nil {
				return nil, err
			}
			dd := *d
			dd.Config = conf
			return dd.Dial(ctx)
		})
		e.client.SetIdleTimeout(agentIdleTimeout)
		b.agents[id] = e
	}
	return e
}

// tlsConfig returns the daemon side of id's identity, read again when
// the Secret was replaced.
func (b *Backend) tlsConfig(ctx context.Context, id string, e *agentEntry) (*tls.Config, error) {
	s, err := b.identity(ctx, id)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.conf != nil && e.uid == string(s.UID) {
		return e.conf, nil
	}
	ident := agenttls.Identity{}
	for k, v := range s.Data {
		ident[k] = bytes.Clone(v)
	}
	if err := ident.Validate(); err != nil {
		return nil, err
	}
	conf, err := ident.ClientConfig()
	if err != nil {
		return nil, err
	}
	e.conf, e.uid = conf, string(s.UID)
	return conf, nil
}

// agentAddr is where sandbox id's agent listens: its pod's IP, once the
// pod runs. Whoever holds that IP is checked by the handshake, not here.
func (b *Backend) agentAddr(id string) (string, error) {
	p := b.podOf(id)
	if p == nil || p.DeletionTimestamp != nil {
		return "", errdefs.Unreachable("sandbox %s has no pod", id)
	}
	if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return "", errdefs.Unreachable("pod %s is %s", p.Name, p.Status.Phase)
	}
	return net.JoinHostPort(p.Status.PodIP, strconv.Itoa(b.cfg.AgentPort)), nil
}

// refuseAgent records a refused connection: in the log and the counter
// always, as an event at most every 10 s per sandbox.
func (b *Backend) refuseAgent(id string, e *agentEntry, cause error) {
	b.refused.Add(1)
	b.log.Warn("agent channel refused", "sandbox", id, "err", cause)
	e.mu.Lock()
	due := time.Since(e.lastEvent) > 10*time.Second
	if due {
		e.lastEvent = time.Now()
	}
	e.mu.Unlock()
	if due {
		b.emit(&sandbox.Event{SandboxID: id, Type: "security", Actor: "daemon",
			Cause: sandbox.CauseReconciler, Outcome: "refused", Message: cause.Error()})
	}
}

// Forget drops the client of a deleted sb.
func (b *Backend) Forget(sb *sandbox.Sandbox) {
	b.mu.Lock()
	delete(b.agents, sb.ID)
	delete(b.cpu, sb.ID)
	b.mu.Unlock()
}

// WaitReady waits until sb's agent answers a ping.
func (b *Backend) WaitReady(ctx context.Context, sb *sandbox.Sandbox) error {
	c := b.Agent(sb)
	var last error
	err := waitCache(ctx, b.cfg.ReadyTimeout, "waiting for the agent", func() (bool, error) {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, last = c.Ping(pctx)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last ping: %v; init log: %q)", err, last, b.InitLog(sb, 1024, 0))
	}
	return nil
}

// DialPort connects to port of sb through its agent.
func (b *Backend) DialPort(ctx context.Context, sb *sandbox.Sandbox, port int) (net.Conn, error) {
	c, err := b.Agent(sb).DialPort(ctx, port)
	if err != nil {
		return nil, errdefs.Unreachable("sandbox %s port %d: %v", sb.ID, port, err)
	}
	return c, nil
}
