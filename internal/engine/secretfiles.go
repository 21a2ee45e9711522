package engine

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/secrets"
	"github.com/berth-sh/berth/internal/store"
)

// Secret files: references with a File are written by the agent on the
// sandbox's /run/secrets tmpfs (the node mounts one when HasSecretFiles)
// at every transition to running, before the Running hook (and so before
// a template's service starts). Each delivery makes the tmpfs hold exactly
// the files whose secrets exist now: a removed secret's file is gone at
// the next start, and SecretChanged pushes a removal or a new value to the
// sandboxes already running.

// secretFilesTimeout bounds one delivery to an agent: the sandbox's own
// code cannot hold a start longer than that.
const secretFilesTimeout = 5 * time.Second

// HasSecretFiles reports whether sb has a reference delivered as a file.
func HasSecretFiles(sb *sandbox.Sandbox) bool { return sb.Spec.HasSecretFiles() }

func hasEnvSecrets(sb *sandbox.Sandbox) bool {
	for _, r := range sb.Spec.Secrets {
		if r.File == "" {
			return true
		}
	}
	return false
}

// checkFileRef validates a file reference; files holds the paths seen so
// far (a path twice, or one a directory of another, is a 400).
func checkFileRef(r sandbox.SecretRef, files map[string]bool) error {
	if r.Env != "" {
		return errdefs.Invalid("secret %s: env and file in one reference; give two", r.Name)
	}
	if _, err := secrets.CheckTarget(secrets.File, r.File); err != nil {
		return errdefs.Invalid("secret %s: %s", r.Name, errdefs.Message(err))
	}
	if files[r.File] {
		return errdefs.Invalid("secret file %s is given twice", r.File)
	}
	if r.File == wire.EgressCABundle {
		return errdefs.Invalid("secret file %s is the egress CA bundle's path", r.File)
	}
	for p := range files {
		if strings.HasPrefix(p, r.File+"/") || strings.HasPrefix(r.File, p+"/") {
			return errdefs.Invalid("secret file %s and %s: one is a directory of the other", p, r.File)
		}
	}
	files[r.File] = true
	return nil
}

// secretFiles resolves sb's file references now; a removed secret is left
// out (revoked).
func (m *Engine) secretFiles(ctx context.Context, sb *sandbox.Sandbox) ([]wire.SecretFile, error) {
	if m.secrets == nil {
		return nil, errdefs.Unavailable("sandbox %s references secrets and this daemon holds none", sb.ID)
	}
	var out []wire.SecretFile
	for _, r := range sb.Spec.Secrets {
		if r.File == "" {
			continue
		}
		v, err := m.secrets.Resolve(ctx, sb.Tenant, r.Name)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, wire.SecretFile{Path: r.File, Data: v})
	}
	return out, nil
}

// deliverSecretFiles writes sb's secret files through its agent, a few
// tries within secretFilesTimeout (the agent of a woken sandbox may take
// a moment to listen again). A failure is an event on the sandbox; it
// fails a create (see transition), never a start: a started sandbox runs
// without its files.
func (m *Engine) deliverSecretFiles(ctx context.Context, sb *sandbox.Sandbox, why string) error {
	files, err := m.secretFiles(ctx, sb)
	if err == nil {
		err = failpoint.Inject("secrets.deliver")
	}
	var ca, system []byte
	if err == nil && sb.Spec.HasEgressSecrets() {
		var px node.EgressProxy
		if px, err = node.Need[node.EgressProxy](m.node, node.OpEgressSecrets); err == nil {
			ca, system, err = px.EgressCA(ctx, sb)
		}
	}
	if err == nil {
		defer func() {
			for i := range files {
				clear(files[i].Data)
			}
		}()
		dctx, cancel := context.WithTimeout(ctx, secretFilesTimeout)
		c := m.node.Agent(sb)
		for {
			err = c.SecretFilesCA(dctx, sb.Spec.User, files, ca, system)
			if err == nil || !errors.Is(err, errdefs.ErrUnavailable) || dctx.Err() != nil {
				break
			}
			select {
			case <-time.After(100 * time.Millisecond):
			case <-dctx.Done():
			}
		}
		cancel()
	}
	ev := &sandbox.Event{SandboxID: sb.ID, Type: "secrets", Actor: "daemon", Cause: sandbox.CauseReconciler, Outcome: "ok",
		Message: why + ": " + plural(len(files), "secret file") + " in " + wire.SecretDir}
	if len(ca) > 0 {
		ev.Message += ", egress CA bundle " + wire.EgressCABundle
	}
	if err != nil {
		ev.Outcome, ev.Message = "error", why+": secret files not written: "+errdefs.Message(err)
		m.log.Warn("secret files not written", "sandbox", sb.ID, "err", err)
	}
	m.eventAsync(ev)
	return err
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// SecretChanged pushes tenant's secret name, just replaced or removed, to
// every running sandbox of the tenant that has it as a file: the file is
// rewritten, or overwritten and removed. Best effort: each sandbox's
// outcome is an event on it; the count of sandboxes reached is returned.
func (m *Engine) SecretChanged(ctx context.Context, tenant, name string) int {
	list, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.OwnedBy(tenant), States: []sandbox.State{sandbox.StateRunning}}, store.Page{})
	if err != nil {
		m.log.Warn("secret change not pushed", "err", err)
		return 0
	}
	n := 0
	for _, sb := range list {
		if sb.Tenant != tenant || !refsFile(sb, name) {
			continue
		}
		if m.deliverSecretFiles(ctx, sb, "secret "+name+" changed") == nil {
			n++
		}
	}
	return n
}

func refsFile(sb *sandbox.Sandbox, name string) bool {
	for _, r := range sb.Spec.Secrets {
		if r.File != "" && r.Name == name {
			return true
		}
	}
	return false
}
