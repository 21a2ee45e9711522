// Package nodeagent is berth's agent on a Kubernetes node that runs gVisor
// pods (`berth kube-node-agent`, a DaemonSet in production): the one thing
// the kubernetes backend cannot do through the API server, freezing and
// thawing a pod's processes in place, done with the node's own runsc
// (`runsc --root <containerd's runsc root> pause|resume <pod sandbox id>`).
// gVisor pauses a whole sandbox, every container of the pod, with its
// memory kept: the Sentry stops scheduling its tasks.
//
// Its door is HTTPS under mutual TLS with pinned certificates (package
// agenttls: the node agent holds the "agent" pair, the daemon the
// "daemon" pair, each side accepts exactly the other's certificate), so
// only berth's daemon is served and the daemon talks only to its node
// agent. It acts only on pods of the namespaces it was given whose name is
// a berth sandbox pod's, and finds a pod's sandbox in runsc's own state
// (written by runsc on the host, from the OCI spec containerd wrote): it
// reads nothing a sandbox writes and follows no path from a request.
//
//	GET  /v1/pods/{namespace}/{pod}         → {"status": "running"|"paused"}
//	POST /v1/pods/{namespace}/{pod}/pause   → {"status": "paused"}
//	POST /v1/pods/{namespace}/{pod}/resume  → {"status": "running"}
//
// Errors are {"error": {"code", "message"}} with errdefs' status: 404 a
// pod with no gVisor sandbox on this node (a runc pod, or gone), 403 a
// namespace or name it does not serve, 409 a sandbox in another state.
package nodeagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// The annotations containerd's CRI plugin puts in every container's OCI
// spec (k8s.io/cri-api's annotations, containerd 1.6 and later).
const (
	annContainerType    = "io.kubernetes.cri.container-type"
	annSandboxName      = "io.kubernetes.cri.sandbox-name"
	annSandboxNamespace = "io.kubernetes.cri.sandbox-namespace"
	typeSandbox         = "sandbox"
)

// Status of a pod's gVisor sandbox as the node agent reports it.
const (
	StatusRunning = "running"
	StatusPaused  = "paused"
)

// PodPrefix begins the name of every sandbox pod of berth's
// (kube.podName); the node agent serves no other pod.
const PodPrefix = "berth-"

var (
	dnsLabelRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	// containerd's container ids: 64 hex digits. Checked before an id is
	// an argument of runsc (never a flag).
	containerIDRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Config configures the node agent.
type Config struct {
	// Runsc is the runsc binary (the one containerd's shim runs).
	Runsc string
	// Root is runsc's root of the node's pods: the shim's root joined
	// with containerd's namespace (/run/containerd/runsc/k8s.io).
	Root string
	// Namespaces are the only namespaces whose pods it acts on (berth's
	// sandbox namespace).
	Namespaces []string
	// Timeout bounds one runsc call. Default 30 s.
	Timeout time.Duration
	Logger  *slog.Logger
}

// Server serves the node agent's routes.
type Server struct {
	cfg Config
	log *slog.Logger
	// mu: one runsc state change at a time (a pause and a resume of one
	// pod never cross).
	mu sync.Mutex
}

// New checks cfg and returns the server.
func New(cfg Config) (*Server, error) {
	if cfg.Runsc == "" || cfg.Root == "" || len(cfg.Namespaces) == 0 {
		return nil, errors.New("node agent: runsc, its root and at least one namespace are required")
	}
	for _, ns := range cfg.Namespaces {
		if !dnsLabelRE.MatchString(ns) || len(ns) > 63 {
			return nil, fmt.Errorf("node agent: namespace %q is not a DNS label", ns)
		}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Server{cfg: cfg, log: cfg.Logger}, nil
}

// Handler is the node agent's HTTP handler (served under mutual TLS).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/pods/{namespace}/{pod}", func(w http.ResponseWriter, r *http.Request) {
		s.serve(w, r, "")
	})
	mux.HandleFunc("POST /v1/pods/{namespace}/{pod}/{op}", func(w http.ResponseWriter, r *http.Request) {
		op := r.PathValue("op")
		if op != "pause" && op != "resume" {
			writeErr(w, errdefs.NotFound("no operation %q", op))
			return
		}
		s.serve(w, r, op)
	})
	return mux
}

// Reply is the answer of every route.
type Reply struct {
	Status string `json:"status"`
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, op string) {
	ns, pod := r.PathValue("namespace"), r.PathValue("pod")
	if err := s.allowed(ns, pod); err != nil {
		s.log.Warn("node agent refused", "namespace", ns, "pod", pod, "op", op, "err", err)
		writeErr(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	id, status, err := s.find(ctx, ns, pod)
	if err == nil {
		status, err = s.apply(ctx, id, status, op)
	}
	if err != nil {
		s.log.Warn("node agent", "namespace", ns, "pod", pod, "op", op, "err", err)
		writeErr(w, err)
		return
	}
	if op != "" {
		s.log.Info("node agent", "namespace", ns, "pod", pod, "op", op, "status", status)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(Reply{Status: status})
}

// allowed: a namespace it serves and a berth sandbox pod's name.
func (s *Server) allowed(ns, pod string) error {
	if !slices.Contains(s.cfg.Namespaces, ns) {
		return errdefs.Permission("namespace %q is not served by this node agent", ns)
	}
	if len(pod) > 63 || !dnsLabelRE.MatchString(pod) || len(pod) <= len(PodPrefix) || pod[:len(PodPrefix)] != PodPrefix {
		return errdefs.Permission("pod %q is not a berth sandbox pod", pod)
	}
	return nil
}

// apply moves sandbox id from status to what op asks (nothing for "", a
// no-op when it is there already) and returns the status after.
func (s *Server) apply(ctx context.Context, id, status, op string) (string, error) {
	want := map[string]string{"pause": StatusPaused, "resume": StatusRunning}[op]
	if op == "" || status == want {
		return status, nil
	}
	from := map[string]string{"pause": StatusRunning, "resume": StatusPaused}[op]
	if status != from {
		return "", errdefs.Conflict("the pod's sandbox is %s: cannot %s it", status, op)
	}
	if _, err := s.runsc(ctx, op, id); err != nil {
		return "", err
	}
	return want, nil
}

// find returns the id and status of pod ns/name's gVisor sandbox.
func (s *Server) find(ctx context.Context, ns, name string) (id, status string, err error) {
	out, err := s.runsc(ctx, "list", "--format=json")
	if err != nil {
		return "", "", err
	}
	return FindSandbox(out, ns, name)
}

// runsc runs the node's runsc on its root; its output, or an error with
// the end of what it printed.
func (s *Server) runsc(ctx context.Context, args ...string) ([]byte, error) {
	if len(args) == 2 && args[0] != "list" && !containerIDRE.MatchString(args[1]) {
		return nil, fmt.Errorf("container id %q", args[1])
	}
	cmd := exec.CommandContext(ctx, s.cfg.Runsc, append([]string{"--root", s.cfg.Root}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := stderr.Bytes()
		if len(msg) > 512 {
			msg = msg[len(msg)-512:]
		}
		return nil, fmt.Errorf("runsc %s: %v: %s", args[0], err, bytes.TrimSpace(msg))
	}
	return stdout.Bytes(), nil
}

// state is what `runsc list --format=json` prints of one container (an
// OCI state).
type state struct {
	ID          string            `json:"id"`
	Status      string            `json:"status"`
	Annotations map[string]string `json:"annotations"`
}

// maxList bounds runsc's list output read (a node runs at most a few
// hundred pods).
const maxList = 16 << 20

// FindSandbox picks, from runsc's list (JSON), the sandbox container of
// pod ns/name that is running or paused: its id and status. None is
// errdefs.ErrNotFound (no gVisor pod of that name on this node); two are
// a conflict (a pod of that name being replaced: ask again).
func FindSandbox(list []byte, ns, name string) (id, status string, err error) {
	if len(list) > maxList {
		return "", "", fmt.Errorf("runsc list printed %d bytes", len(list))
	}
	var states []state
	if t := bytes.TrimSpace(list); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		if err := json.Unmarshal(t, &states); err != nil {
			return "", "", fmt.Errorf("runsc list: %w", err)
		}
	}
	n := 0
	for _, st := range states {
		a := st.Annotations
		if a[annContainerType] != typeSandbox || a[annSandboxNamespace] != ns || a[annSandboxName] != name {
			continue
		}
		if st.Status != StatusRunning && st.Status != StatusPaused {
			continue
		}
		if !containerIDRE.MatchString(st.ID) {
			return "", "", fmt.Errorf("runsc lists pod %s/%s with id %q", ns, name, st.ID)
		}
		id, status = st.ID, st.Status
		n++
	}
	switch n {
	case 0:
		return "", "", errdefs.NotFound("pod %s/%s has no running gVisor sandbox on this node", ns, name)
	case 1:
		return id, status, nil
	}
	return "", "", errdefs.Conflict("pod %s/%s has %d gVisor sandboxes on this node (being replaced): try again", ns, name, n)
}

// writeErr answers err with its code; the message is the whole error
// (its one reader is the daemon, which logs and wraps it).
func writeErr(w http.ResponseWriter, err error) {
	code, status := errdefs.Code(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": err.Error()}})
}
