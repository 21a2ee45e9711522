package agentsandbox

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// maxObjectBytes bounds the JSON of one object the door parses. The
// apiserver's own limit is larger (1.5 MiB in etcd); a sandbox's spec
// has no business being near it.
const maxObjectBytes = 256 << 10

// blueprint is the part of a Sandbox's or SandboxTemplate's spec the door
// reads (agent-sandbox's SandboxBlueprint, lifecycle and operating mode).
type blueprint struct {
	PodTemplate struct {
		Spec corev1.PodSpec `json:"spec"`
	} `json:"podTemplate"`
	VolumeClaimTemplates []json.RawMessage `json:"volumeClaimTemplates,omitempty"`
	Service              *bool             `json:"service,omitempty"`
	ShutdownTime         *time.Time        `json:"shutdownTime,omitempty"`
	ShutdownPolicy       string            `json:"shutdownPolicy,omitempty"`
	OperatingMode        string            `json:"operatingMode,omitempty"`
	NetworkPolicy        json.RawMessage   `json:"networkPolicy,omitempty"`
}

// claimSpec is a SandboxClaim's spec.
type claimSpec struct {
	WarmPoolRef struct {
		Name string `json:"name"`
	} `json:"warmPoolRef"`
	Lifecycle *struct {
		ShutdownTime   *time.Time `json:"shutdownTime,omitempty"`
		ShutdownPolicy string     `json:"shutdownPolicy,omitempty"`
	} `json:"lifecycle,omitempty"`
	Env                  []json.RawMessage `json:"env,omitempty"`
	VolumeClaimTemplates []json.RawMessage `json:"volumeClaimTemplates,omitempty"`
}

// poolSpec is a SandboxWarmPool's spec.
type poolSpec struct {
	Replicas    *int32 `json:"replicas,omitempty"`
	TemplateRef struct {
		Name string `json:"name"`
	} `json:"sandboxTemplateRef"`
}

// specOf decodes obj's spec into v, strictly bounded in size.
func specOf(obj *unstructured.Unstructured, v any) error {
	raw, ok := obj.Object["spec"]
	if !ok {
		return errdefs.Invalid("the object has no spec")
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return errdefs.Invalid("spec: %v", err)
	}
	if len(b) > maxObjectBytes {
		return errdefs.Limit("agent_sandbox_spec_bytes", maxObjectBytes, "spec of %d bytes", len(b))
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errdefs.Invalid("spec: %v", err)
	}
	return nil
}

// Mapping is what a blueprint becomes in berth: the create request, and
// the fields of the object berth does not serve (said in the Ready
// condition's message, so a user sees them).
type Mapping struct {
	// Req is REST's create request: the gate validates it with REST's
	// rules, the engine takes it through REST's one conversion.
	Req       api.CreateSandboxRequest
	NotServed []string
}

// mapBlueprint turns a blueprint into a berth create. templates maps an
// image to the berth template that serves it: a pod template's image is
// not pulled and run as it is, it names one of berth's templates (the
// daemon's --image and --template-image), so a manifest runs only what
// berth's operator made available. now is for shutdownTime.
func mapBlueprint(bp *blueprint, templates map[string]string, now time.Time) (*Mapping, error) {
	ps := &bp.PodTemplate.Spec
	if len(ps.Containers) != 1 {
		return nil, errdefs.Invalid("podTemplate.spec.containers: berth runs one container per sandbox, got %d", len(ps.Containers))
	}
	c := &ps.Containers[0]
	tpl, ok := templates[c.Image]
	if !ok {
		return nil, errdefs.Invalid("image %q is not one berth serves (the daemon's --image and --template-image name the images it runs)", c.Image)
	}
	m := &Mapping{Req: api.CreateSandboxRequest{Template: tpl}}
	if len(c.Env) > 0 {
		m.Req.Env = map[string]string{}
		for _, e := range c.Env {
			if e.ValueFrom != nil {
				return nil, errdefs.Invalid("env %s: valueFrom is not served (use berth secrets)", e.Name)
			}
			m.Req.Env[e.Name] = e.Value
		}
	}
	res := c.Resources.Limits
	if len(res) == 0 {
		res = c.Resources.Requests
	}
	if q, ok := res[corev1.ResourceCPU]; ok {
		m.Req.Resources.CPUs = float64(q.MilliValue()) / 1000
		if m.Req.Resources.CPUs <= 0 {
			return nil, errdefs.Invalid("resources: cpu %s is not positive", q.String())
		}
	}
	if q, ok := res[corev1.ResourceMemory]; ok {
		if m.Req.Resources.MemoryBytes = q.Value(); m.Req.Resources.MemoryBytes <= 0 {
			return nil, errdefs.Invalid("resources: memory %s is not positive", q.String())
		}
	}
	if q, ok := res[corev1.ResourceEphemeralStorage]; ok {
		if m.Req.Resources.DiskBytes = q.Value(); m.Req.Resources.DiskBytes <= 0 {
			return nil, errdefs.Invalid("resources: ephemeral-storage %s is not positive", q.String())
		}
	}
	if c.WorkingDir != "" {
		m.Req.Workdir = c.WorkingDir
	}
	if bp.ShutdownTime != nil {
		d := bp.ShutdownTime.Sub(now)
		if d <= 0 {
			return nil, errdefs.Invalid("shutdownTime %s has passed", bp.ShutdownTime.Format(time.RFC3339))
		}
		m.Req.TimeoutSeconds = (d.Round(time.Second) + time.Second).Seconds()
	}
	// At shutdownTime berth deletes the sandbox; the object is kept and
	// reports it gone (Retain, the CRD's default). Delete's removal of
	// the object itself is not served (named below).
	switch bp.ShutdownPolicy {
	case "", "Retain", "Delete":
	default:
		return nil, errdefs.Invalid("shutdownPolicy %q is not served (Retain or Delete)", bp.ShutdownPolicy)
	}
	switch bp.OperatingMode {
	case "", "Running":
	default:
		return nil, errdefs.Invalid("operatingMode %q is not served", bp.OperatingMode)
	}
	// What is accepted but not served: named, so the user is not misled.
	ns := func(cond bool, what string) {
		if cond {
			m.NotServed = append(m.NotServed, what)
		}
	}
	ns(bp.ShutdownPolicy == "Delete" && bp.ShutdownTime != nil, "shutdownPolicy Delete (the object is kept, its sandbox deleted)")
	ns(len(c.Command) > 0 || len(c.Args) > 0, "command/args (berth's agent is PID 1)")
	ns(len(c.Ports) > 0, "ports")
	ns(c.ReadinessProbe != nil || c.LivenessProbe != nil || c.StartupProbe != nil, "probes")
	ns(len(c.VolumeMounts) > 0 || len(ps.Volumes) > 0, "volumes")
	ns(len(bp.VolumeClaimTemplates) > 0, "volumeClaimTemplates")
	ns(len(ps.InitContainers) > 0, "initContainers")
	ns(ps.RuntimeClassName != nil, "runtimeClassName (the daemon's --runtime-class-map decides)")
	ns(bp.Service != nil && *bp.Service, "service")
	ns(len(bp.NetworkPolicy) > 0 && string(bp.NetworkPolicy) != "null", "networkPolicy (network mode none)")
	sort.Strings(m.NotServed)
	return m, nil
}

// notServedNote is the Ready message's tail naming what was not served.
func notServedNote(ns []string) string {
	if len(ns) == 0 {
		return ""
	}
	return fmt.Sprintf(" (not served: %s)", strings.Join(ns, ", "))
}
