// Package agentsandbox is berth's door for kubernetes-sigs/agent-sandbox's
// resources: `kubectl apply` of a Sandbox, SandboxTemplate, SandboxWarmPool
// or SandboxClaim makes berth sandboxes, and the objects' status says
// what berth did, in the fields and conditions agent-sandbox's tools read.
//
// Pinned: kubernetes-sigs/agent-sandbox commit
// 2fd412d55ecae90861a101a5424a75473de97c36 (v0.5.6 and 12 commits, August
// 2026), API version v1beta1 only: `agents.x-k8s.io` Sandbox and
// `extensions.agents.x-k8s.io` SandboxTemplate, SandboxClaim and
// SandboxWarmPool. The CRDs in crds/ are that commit's k8s/crds with the
// v1alpha1 version (served there through a conversion webhook) removed.
//
// Shape: a controller of those CRDs, not an aggregated API. berth installs
// the CRDs and reconciles each object into berth sandboxes through its
// engine, the same calls the REST door makes. An aggregated API would
// have to serve the whole Kubernetes API machinery (watch, lists,
// resourceVersions, field managers, server-side apply) for four kinds;
// CRDs get all of it from the apiserver, kubectl and the agent-sandbox
// SDK see exactly the objects they know, and client-go (already berth's
// dependency) gives informers and a work queue. The price, a second copy
// of what a user asked for, is kept harmless by one rule: **berth's store
// stays the record.** The objects are requests and reports: the door never
// reads state back from them except the one adoption note a claim carries
// (below), and a berth sandbox deleted through berth's own API is reported
// gone, not made again.
//
// Who acts. Each object acts as the berth API key stored in its
// namespace's Secret `berth-api-key` (data key `key`): the namespace's
// owner binds it to a berth tenant by putting a key there, as any client
// of the API does. Every reconcile authenticates that key (a revoked or
// expired key stops working at its next reconcile), authorizes it with the
// REST routes' own rules (creating and deleting need `sandboxes:write`),
// writes the audit record before it acts (Source `k8s:<namespace>/<kind>/
// <name>`; an audit log that cannot be written refuses the action) and
// calls the engine with the key's tenant and actor, so quotas, events,
// owner-scoped reads and rate of starts are the tenant's as through any
// other door. A namespace without a key, or with one lacking the right,
// gets its objects' Ready condition False with reason Unauthenticated or
// Forbidden, and nothing made.
//
// What maps to what:
//
//   - Sandbox: one berth sandbox (labels agents.x-k8s.io/uid, /kind,
//     /name), its pod template mapped by mapBlueprint: the single
//     container's image names the berth template serving it (an image
//     berth does not serve is refused: no manifest makes berth pull what
//     its operator did not choose), its env, resources (limits, else
//     requests) and workingDir, shutdownTime as the hard timeout.
//   - SandboxTemplate: a blueprint that pools and claims use; it makes
//     nothing itself.
//   - SandboxWarmPool: `replicas` berth sandboxes of its template made
//     ahead, running, labelled agents.x-k8s.io/pool-uid.
//   - SandboxClaim: adopts a ready member of its warmPoolRef (the member's
//     id written to the claim's annotation agents.x-k8s.io/sandbox-name
//     before its status says so) and the pool makes a replacement; with
//     no ready member the claim gets a sandbox of the pool's template made
//     for it (a cold claim). The annotation is trusted only for a sandbox
//     the claim's own tenant owns that carries its pool's label: a claim
//     written with another's id in it gets nothing of that sandbox.
//   - deletion: a finalizer (berth.sh/agent-sandbox) holds each object
//     until its sandboxes are deleted through the engine.
//
// Status: Sandbox `conditions` (Ready: True with reason DependenciesReady
// when berth's sandbox runs; False with the reason of refusal or
// failure), `podIPs`, `nodeName`, `selector` (the berth pod's label
// selector) and the annotation agents.x-k8s.io/pod-name (the pod is in
// berth's sandbox namespace); SandboxClaim `conditions` (Ready) and
// `sandbox.name` (the berth sandbox's id), `sandbox.podIPs`;
// SandboxWarmPool `replicas`, `readyReplicas`, `selector`,
// `observedGeneration`.
//
// Not served (accepted and named in the Ready message where an object
// uses them, or refused where serving them wrongly would mislead):
// serviceFQDN and service (no Service is made; reach a sandbox through
// berth's API and port proxy), containers' command/args (berth's agent is
// PID 1; run a process through berth's API), ports, probes, volumes and
// volumeClaimTemplates, initContainers, more than one container
// (refused), env valueFrom (refused: use berth's secrets),
// runtimeClassName (berth's --runtime-class-map decides), a template's
// networkPolicy, networkPolicyManagement, envVarsInjectionPolicy and
// volumeClaimTemplatesPolicy (sandboxes get network mode none), a
// claim's env, additionalPodMetadata, volumeClaimTemplates and
// ttlSecondsAfterFinished, shutdownPolicy Delete's removal of the object
// (the object is kept and reports its sandbox gone, as Retain does),
// other shutdown policies (refused), operatingMode Suspended (refused), a pool's updateStrategy
// (members made from an older template stay until claimed or the pool is
// resized), the PodScheduled, Suspended and Finished conditions.
package agentsandbox

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/yaml"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/access"
	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/identity"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/convert"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/store"
)

//go:embed crds/*.yaml
var crdFiles embed.FS

// The resources served.
var (
	SandboxGVR  = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}
	TemplateGVR = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxtemplates"}
	ClaimGVR    = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxclaims"}
	PoolGVR     = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxwarmpools"}
	crdGVR      = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// maxReplicas bounds a SandboxWarmPool's size (berth's own pools'
// bound, pools.MaxPoolSize, is the same order); the tenant's quota
// bounds it further.
const maxReplicas = 100

// Names the door writes.
const (
	Finalizer     = "berth.sh/agent-sandbox"
	KeySecret     = "berth-api-key"
	KeySecretData = "key"

	labelUID      = "agents.x-k8s.io/uid"
	labelKind     = "agents.x-k8s.io/kind"
	labelName     = "agents.x-k8s.io/name"
	labelPoolUID  = "agents.x-k8s.io/pool-uid"
	annotSandbox  = "agents.x-k8s.io/sandbox-name"
	annotPodName  = "agents.x-k8s.io/pod-name"
	annotBerthID  = "berth.sh/sandbox"
	conditionType = "Ready"
)

// Engine is what the door calls: the engine's own operations, as the REST
// door calls them.
type Engine interface {
	Create(ctx context.Context, req *engine.CreateRequest, opt engine.CreateOptions) (*sandbox.Sandbox, error)
	Delete(ctx context.Context, ref, actor string, cause sandbox.Cause, reason string) (*sandbox.Sandbox, error)
	ListFiltered(ctx context.Context, f store.SandboxFilter, p store.Page) ([]*sandbox.Sandbox, string, error)
}

// Authenticator resolves a berth API key (auth.Authenticator).
type Authenticator interface {
	Authenticate(ctx context.Context, key string) (auth.Principal, error)
}

// Config is what the door needs.
type Config struct {
	Engine  Engine
	Auth    Authenticator
	Audit   *audit.Log // nil: not audited (tests of the mapping only)
	Dynamic dynamic.Interface
	Client  kubernetes.Interface
	// Namespace, if set, is the one namespace whose objects the door
	// serves; "" serves every namespace.
	Namespace string
	// SandboxNamespace is where the backend makes the pods (for podIPs
	// and the pod-name annotation).
	SandboxNamespace string
	// Templates maps an image to the berth template serving it.
	Templates map[string]string
	// Resync is how often every object is reconciled again (berth's
	// state changes without an object event). Default 10 s.
	Resync time.Duration
	Log    *slog.Logger
	Now    func() time.Time
	// Held, if set, says whether this replica may act: replicas share the
	// objects, and one reconciling them at a time (the node lease's
	// holder) keeps two from making a sandbox for one object. The others
	// watch and wait.
	Held func() bool
}

// Door reconciles agent-sandbox objects into berth sandboxes.
type Door struct {
	cfg   Config
	queue workqueue.TypedRateLimitingInterface[key]
	inf   dynamicinformer.DynamicSharedInformerFactory
	mu    sync.Mutex // one reconcile at a time: adoption is check-then-write
	// refusedSpecs are the objects whose create the gate refused as it
	// translated them (an invalid spec), by uid: the fingerprint of what
	// the mapping read (the object's generation, its template's version)
	// and the refusal. The same refusal is reported again at each resync
	// without going through the gate again, so an object left invalid
	// leaves one audit record, not one every resync. Under mu.
	refusedSpecs map[types.UID]specRefusal
}

type specRefusal struct {
	fingerprint string
	err         error
}

type key struct {
	gvr             schema.GroupVersionResource
	namespace, name string
}

// New returns the door for cfg.
func New(cfg Config) *Door {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Resync == 0 {
		cfg.Resync = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Door{cfg: cfg, queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[key]())}
}

// InstallCRDs creates the pinned CRDs, or updates them to the pinned
// schema, and waits until the apiserver serves them.
func InstallCRDs(ctx context.Context, dyn dynamic.Interface) error {
	ents, err := crdFiles.ReadDir("crds")
	if err != nil {
		return err
	}
	for _, e := range ents {
		b, err := crdFiles.ReadFile("crds/" + e.Name())
		if err != nil {
			return err
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(b, &obj.Object); err != nil {
			return fmt.Errorf("crd %s: %w", e.Name(), err)
		}
		cur, err := dyn.Resource(crdGVR).Get(ctx, obj.GetName(), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = dyn.Resource(crdGVR).Create(ctx, obj, metav1.CreateOptions{})
		case err == nil:
			obj.SetResourceVersion(cur.GetResourceVersion())
			_, err = dyn.Resource(crdGVR).Update(ctx, obj, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("installing CRD %s: %w", obj.GetName(), err)
		}
	}
	for _, gvr := range []schema.GroupVersionResource{SandboxGVR, TemplateGVR, ClaimGVR, PoolGVR} {
		for {
			_, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("CRD %s not served: %w", gvr.Resource, err)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// Run serves until ctx ends: informers over the four kinds, one worker.
func (d *Door) Run(ctx context.Context) error {
	d.inf = dynamicinformer.NewFilteredDynamicSharedInformerFactory(d.cfg.Dynamic, d.cfg.Resync, d.cfg.Namespace, nil)
	var synced []cache.InformerSynced
	for _, gvr := range []schema.GroupVersionResource{SandboxGVR, TemplateGVR, ClaimGVR, PoolGVR} {
		gvr := gvr
		inf := d.inf.ForResource(gvr).Informer()
		enq := func(o any) {
			if u, ok := o.(*unstructured.Unstructured); ok {
				d.enqueue(gvr, u)
			} else if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				if u, ok := t.Obj.(*unstructured.Unstructured); ok {
					d.enqueue(gvr, u)
				}
			}
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enq,
			UpdateFunc: func(_, n any) { enq(n) }, DeleteFunc: enq}); err != nil {
			return err
		}
		synced = append(synced, inf.HasSynced)
	}
	d.inf.Start(ctx.Done())
	defer d.inf.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	go func() { <-ctx.Done(); d.queue.ShutDown() }()
	for {
		k, quit := d.queue.Get()
		if quit {
			return nil
		}
		err := d.reconcile(ctx, k)
		if err != nil && ctx.Err() == nil {
			d.cfg.Log.Warn("agent-sandbox reconcile", "resource", k.gvr.Resource, "namespace", k.namespace, "name", k.name, "err", err)
			d.queue.AddRateLimited(k)
		} else {
			d.queue.Forget(k)
		}
		d.queue.Done(k)
	}
}

func (d *Door) enqueue(gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	d.queue.Add(key{gvr, u.GetNamespace(), u.GetName()})
	// A template or a pool changes what its pools and claims do.
	switch gvr {
	case TemplateGVR, PoolGVR:
		for _, g := range []schema.GroupVersionResource{PoolGVR, ClaimGVR} {
			if g == gvr {
				continue
			}
			objs, _ := d.inf.ForResource(g).Lister().ByNamespace(u.GetNamespace()).List(everything())
			for _, o := range objs {
				if m, ok := o.(metav1.Object); ok {
					d.queue.Add(key{g, m.GetNamespace(), m.GetName()})
				}
			}
		}
	}
}

func (d *Door) get(gvr schema.GroupVersionResource, ns, name string) (*unstructured.Unstructured, error) {
	o, err := d.inf.ForResource(gvr).Lister().ByNamespace(ns).Get(name)
	if err != nil {
		return nil, err
	}
	return o.(*unstructured.Unstructured).DeepCopy(), nil
}

// refusal is a reconcile outcome the object's Ready condition reports:
// not retried at once with backoff, only at the next resync or change of
// the object (a key put in place, a quota freed).
type refusal struct {
	reason string
	err    error
}

func (r *refusal) Error() string { return r.err.Error() }

// Unwrap is the refusal's cause, whose category the audit record's
// outcome names ("error 400").
func (r *refusal) Unwrap() error { return r.err }

func refused(reason string, err error) error { return &refusal{reason, err} }

func (d *Door) reconcile(ctx context.Context, k key) error {
	if d.cfg.Held != nil && !d.cfg.Held() {
		d.queue.AddAfter(k, d.cfg.Resync)
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	obj, err := d.get(k.gvr, k.namespace, k.name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if k.gvr == TemplateGVR {
		return nil // a blueprint: pools and claims read it
	}
	if obj.GetDeletionTimestamp() != nil {
		return d.finalize(ctx, k.gvr, obj)
	}
	if !hasFinalizer(obj) {
		obj.SetFinalizers(append(obj.GetFinalizers(), Finalizer))
		if _, err := d.cfg.Dynamic.Resource(k.gvr).Namespace(k.namespace).Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
			return err
		}
		return nil // the update's event brings it back
	}
	actx, p, err := d.principal(ctx, obj.GetNamespace())
	if err != nil {
		return d.report(ctx, k.gvr, obj, nil, err)
	}
	var sb *sandbox.Sandbox
	switch k.gvr {
	case SandboxGVR:
		sb, err = d.reconcileSandbox(actx, p, obj)
	case ClaimGVR:
		sb, err = d.reconcileClaim(actx, p, obj)
	case PoolGVR:
		return d.reconcilePool(actx, p, obj)
	}
	return d.report(ctx, k.gvr, obj, sb, err)
}

// principal authenticates the namespace's key and authorizes it to make
// and delete sandboxes, as REST's POST /v1/sandboxes is.
func (d *Door) principal(ctx context.Context, ns string) (context.Context, auth.Principal, error) {
	s, err := d.cfg.Client.CoreV1().Secrets(ns).Get(ctx, KeySecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, auth.Principal{}, refused("Unauthenticated", fmt.Errorf("namespace %s has no Secret %s holding a berth API key (data key %q)", ns, KeySecret, KeySecretData))
	}
	if err != nil {
		return nil, auth.Principal{}, err
	}
	p, err := d.cfg.Auth.Authenticate(ctx, strings.TrimSpace(string(s.Data[KeySecretData])))
	if err != nil {
		return nil, auth.Principal{}, refused("Unauthenticated", err)
	}
	if p.IsLease() {
		return nil, auth.Principal{}, refused("Unauthenticated", errors.New("a lease token cannot act for a namespace"))
	}
	if err := access.Authorize(p, access.AgentSandboxAccount, ""); err != nil {
		return nil, auth.Principal{}, refused("Forbidden", err)
	}
	ctx = auth.With(ctx, p)
	return identity.With(ctx, identity.Caller{Tenant: p.Tenant, Actor: p.Actor, KeyID: p.KeyID, Host: p.Host}), p, nil
}

// audited runs fn as op of p through the access layer's gate
// (internal/access): decided, begun in the audit log before it acts,
// completed with its outcome. tr (nil: none) translates the object into
// the operation's request inside the gate, which validates it with
// REST's rules: an object berth refuses leaves REST's record of the
// refusal ("error 400").
func (d *Door) audited(ctx context.Context, p auth.Principal, obj *unstructured.Unstructured, op access.Op, target string, tr access.Translate, fn func() error) error {
	if tr == nil {
		tr = func() (access.Validator, error) { return nil, nil }
	}
	g := access.Gate{Audit: d.cfg.Audit, Log: d.cfg.Log}
	return g.DoTranslated(ctx, access.Call{P: p, Op: op, Target: target,
		Source: "k8s:" + obj.GetNamespace() + "/" + strings.ToLower(obj.GetKind()) + "/" + obj.GetName()}, tr, fn)
}

// owned lists the caller's live sandboxes holding labels.
func (d *Door) owned(ctx context.Context, labels map[string]string) ([]*sandbox.Sandbox, error) {
	var out []*sandbox.Sandbox
	page := store.Page{}
	for {
		sbs, next, err := d.cfg.Engine.ListFiltered(ctx, store.SandboxFilter{Labels: labels}, page)
		if err != nil {
			return nil, err
		}
		out = append(out, sbs...)
		if next == "" {
			break
		}
		page.Cursor = next
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// create makes a sandbox for obj as REST's create (access.SandboxCreate,
// its rule and its record): mapping, run inside the gate, translates what
// obj asks into REST's create request, which the gate validates with
// REST's rules. fingerprint names what the mapping reads; a mapping
// refused before with the same fingerprint is refused again without a
// second record (refusedSpecs).
func (d *Door) create(ctx context.Context, p auth.Principal, obj *unstructured.Unstructured, fingerprint string, mapping func() (*Mapping, error), labels map[string]string) (*sandbox.Sandbox, error) {
	if r, ok := d.refusedSpecs[obj.GetUID()]; ok && r.fingerprint == fingerprint {
		return nil, r.err
	}
	var req api.CreateSandboxRequest
	translated := false
	tr := func() (access.Validator, error) {
		m, err := mapping()
		if err != nil {
			return nil, err
		}
		req = m.Req
		req.Labels = labels
		translated = true
		return input.Request(&req), nil
	}
	var sb *sandbox.Sandbox
	err := d.audited(ctx, p, obj, access.SandboxCreate, obj.GetName(), tr, func() error {
		var err error
		sb, err = d.cfg.Engine.Create(ctx, convert.CreateRequest(&req), engine.CreateOptions{Actor: p.Actor, Tenant: p.Tenant})
		return err
	})
	var r *refusal
	switch {
	case err == nil:
		delete(d.refusedSpecs, obj.GetUID())
	case !translated && errors.As(err, &r), errors.Is(err, errdefs.ErrInvalid), errors.Is(err, errdefs.ErrLimit):
		// Refused as translated or validated: the same object is
		// refused the same way until it or its template changes.
		if !errors.As(err, &r) {
			err = refused("InvalidSpec", err)
		}
		if d.refusedSpecs == nil {
			d.refusedSpecs = map[types.UID]specRefusal{}
		}
		d.refusedSpecs[obj.GetUID()] = specRefusal{fingerprint, err}
	}
	return sb, err
}

// generation is obj's part of a mapping's fingerprint.
func generation(obj *unstructured.Unstructured) string {
	return string(obj.GetUID()) + "@" + strconv.FormatInt(obj.GetGeneration(), 10)
}

// templateVersion is a SandboxTemplate's part of a mapping's fingerprint
// ("" for one that is not there).
func (d *Door) templateVersion(ns, name string) string {
	t, err := d.get(TemplateGVR, ns, name)
	if err != nil {
		return ""
	}
	return t.GetResourceVersion()
}

func objLabels(kind string, obj *unstructured.Unstructured) map[string]string {
	return map[string]string{labelUID: string(obj.GetUID()), labelKind: kind, labelName: obj.GetName()}
}

func (d *Door) reconcileSandbox(ctx context.Context, p auth.Principal, obj *unstructured.Unstructured) (*sandbox.Sandbox, error) {
	sbs, err := d.owned(ctx, map[string]string{labelUID: string(obj.GetUID())})
	if err != nil {
		return nil, err
	}
	if len(sbs) > 0 {
		if obj.GetAnnotations()[annotBerthID] != sbs[0].ID {
			// The note after a create that lost a race with another
			// write to the object: written now.
			return sbs[0], d.note(ctx, SandboxGVR, obj, annotBerthID, sbs[0].ID)
		}
		return sbs[0], nil
	}
	if obj.GetAnnotations()[annotBerthID] != "" {
		// Made once and gone since (deleted through berth): the store is
		// the record, so it is reported, not made again.
		return nil, refused("SandboxDeleted", fmt.Errorf("berth sandbox %s is gone", obj.GetAnnotations()[annotBerthID]))
	}
	mapping := func() (*Mapping, error) {
		var bp blueprint
		if err := specOf(obj, &bp); err != nil {
			return nil, refused("InvalidSpec", err)
		}
		m, err := mapBlueprint(&bp, d.cfg.Templates, d.cfg.Now())
		if err != nil {
			return nil, refused("InvalidSpec", err)
		}
		return m, nil
	}
	sb, err := d.create(ctx, p, obj, generation(obj), mapping, objLabels("sandbox", obj))
	if err != nil {
		return nil, refusalOf(err)
	}
	return sb, d.note(ctx, SandboxGVR, obj, annotBerthID, sb.ID)
}

// refusalOf makes an engine's 4xx a refusal (reported, not retried
// blindly); other errors are retried.
func refusalOf(err error) error {
	if r := (*refusal)(nil); errors.As(err, &r) {
		return err
	}
	switch {
	case errors.Is(err, errdefs.ErrPermission):
		return refused("Forbidden", err)
	case errors.Is(err, errdefs.ErrExhausted):
		// The tenant's quota or start queue: said, and tried again at
		// the next resync.
		return refused("QuotaExceeded", err)
	case errors.Is(err, errdefs.ErrInvalid), errors.Is(err, errdefs.ErrLimit), errors.Is(err, errdefs.ErrNotFound),
		errors.Is(err, errdefs.ErrNotSupported), errors.Is(err, errdefs.ErrConflict):
		return refused("InvalidSpec", err)
	}
	return err
}

// note writes annotation k=v on obj (the durable note of what berth made
// for it) before its status reports it.
func (d *Door) note(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, k, v string) error {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[k] = v
	obj.SetAnnotations(a)
	u, err := d.cfg.Dynamic.Resource(gvr).Namespace(obj.GetNamespace()).Update(ctx, obj, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	*obj = *u
	return nil
}

// templateOf maps a pool's template.
func (d *Door) templateOf(ns, name string) (*Mapping, error) {
	t, err := d.get(TemplateGVR, ns, name)
	if apierrors.IsNotFound(err) {
		return nil, refused("TemplateNotFound", errdefs.NotFound("SandboxTemplate %s/%s not found", ns, name))
	}
	if err != nil {
		return nil, err
	}
	var bp blueprint
	if err := specOf(t, &bp); err != nil {
		return nil, refused("InvalidSpec", fmt.Errorf("SandboxTemplate %s: %w", name, err))
	}
	bp.ShutdownTime = nil // a template's members have no shutdown of their own
	m, err := mapBlueprint(&bp, d.cfg.Templates, d.cfg.Now())
	if err != nil {
		return nil, refused("InvalidSpec", fmt.Errorf("SandboxTemplate %s: %w", name, err))
	}
	return m, nil
}

func (d *Door) reconcilePool(ctx context.Context, p auth.Principal, obj *unstructured.Unstructured) error {
	var ps poolSpec
	if err := specOf(obj, &ps); err != nil {
		return d.poolStatus(ctx, obj, 0, 0)
	}
	want := 0
	if ps.Replicas != nil {
		want = int(*ps.Replicas)
	}
	if want < 0 {
		want = 0
	}
	if want > maxReplicas {
		d.cfg.Log.Warn("agent-sandbox pool: replicas past the door's bound", "namespace", obj.GetNamespace(), "name", obj.GetName(),
			"replicas", want, "max", maxReplicas)
		want = maxReplicas
	}
	members, err := d.members(ctx, obj)
	if err != nil {
		return err
	}
	// Spare members past the size go, newest first.
	for len(members) > want {
		sb := members[len(members)-1]
		members = members[:len(members)-1]
		if err := d.remove(ctx, p, obj, sb); err != nil {
			return err
		}
	}
	if len(members) < want {
		fp := generation(obj) + "/" + d.templateVersion(obj.GetNamespace(), ps.TemplateRef.Name)
		mapping := func() (*Mapping, error) { return d.templateOf(obj.GetNamespace(), ps.TemplateRef.Name) }
		for len(members) < want {
			labels := map[string]string{labelPoolUID: string(obj.GetUID()), labelKind: "pool-member", labelName: obj.GetName()}
			sb, err := d.create(ctx, p, obj, fp, mapping, labels)
			var r *refusal
			if errors.As(err, &r) {
				d.cfg.Log.Warn("agent-sandbox pool", "namespace", obj.GetNamespace(), "name", obj.GetName(), "err", err)
				return d.poolStatus(ctx, obj, len(members), ready(members))
			}
			if err != nil {
				_ = d.poolStatus(ctx, obj, len(members), ready(members))
				return err
			}
			members = append(members, sb)
		}
	}
	return d.poolStatus(ctx, obj, len(members), ready(members))
}

func ready(sbs []*sandbox.Sandbox) int {
	n := 0
	for _, sb := range sbs {
		if sb.State == sandbox.StateRunning {
			n++
		}
	}
	return n
}

// members are obj's sandboxes no claim has adopted.
func (d *Door) members(ctx context.Context, pool *unstructured.Unstructured) ([]*sandbox.Sandbox, error) {
	sbs, err := d.owned(ctx, map[string]string{labelPoolUID: string(pool.GetUID())})
	if err != nil {
		return nil, err
	}
	adopted := map[string]bool{}
	claims, err := d.inf.ForResource(ClaimGVR).Lister().ByNamespace(pool.GetNamespace()).List(everything())
	if err != nil {
		return nil, err
	}
	for _, c := range claims {
		if id := c.(*unstructured.Unstructured).GetAnnotations()[annotSandbox]; id != "" {
			adopted[id] = true
		}
	}
	var out []*sandbox.Sandbox
	for _, sb := range sbs {
		if !adopted[sb.ID] {
			out = append(out, sb)
		}
	}
	return out, nil
}

func (d *Door) reconcileClaim(ctx context.Context, p auth.Principal, obj *unstructured.Unstructured) (*sandbox.Sandbox, error) {
	var cs claimSpec
	if err := specOf(obj, &cs); err != nil {
		return nil, refused("InvalidSpec", err)
	}
	pool, err := d.get(PoolGVR, obj.GetNamespace(), cs.WarmPoolRef.Name)
	if apierrors.IsNotFound(err) {
		return nil, refused("WarmPoolNotFound", fmt.Errorf("SandboxWarmPool %s/%s not found", obj.GetNamespace(), cs.WarmPoolRef.Name))
	}
	if err != nil {
		return nil, err
	}
	if id := obj.GetAnnotations()[annotSandbox]; id != "" {
		sb, err := d.adopted(ctx, obj, pool, id)
		if err != nil || sb != nil {
			return sb, err
		}
		return nil, refused("SandboxDeleted", fmt.Errorf("berth sandbox %s is gone", id))
	}
	members, err := d.members(ctx, pool)
	if err != nil {
		return nil, err
	}
	for _, sb := range members {
		if sb.State == sandbox.StateRunning {
			err := d.audited(ctx, p, obj, access.AgentSandboxClaim, sb.ID, nil, func() error { return d.note(ctx, ClaimGVR, obj, annotSandbox, sb.ID) })
			if err != nil {
				return nil, err
			}
			d.queue.Add(key{PoolGVR, pool.GetNamespace(), pool.GetName()}) // its refill
			return sb, nil
		}
	}
	// No ready member: one made for the claim, with the pool's label so
	// that the claim's annotation names a sandbox of its pool.
	var ps poolSpec
	if err := specOf(pool, &ps); err != nil {
		return nil, refused("InvalidSpec", err)
	}
	labels := map[string]string{labelPoolUID: string(pool.GetUID()), labelKind: "claim", labelName: obj.GetName(), labelUID: string(obj.GetUID())}
	// A cold claim's own sandbox, made once: found again by its uid.
	if sbs, err := d.owned(ctx, map[string]string{labelUID: string(obj.GetUID())}); err != nil {
		return nil, err
	} else if len(sbs) > 0 {
		return sbs[0], d.note(ctx, ClaimGVR, obj, annotSandbox, sbs[0].ID)
	}
	mapping := func() (*Mapping, error) {
		m, err := d.templateOf(obj.GetNamespace(), ps.TemplateRef.Name)
		if err != nil {
			return nil, err
		}
		if cs.Lifecycle != nil && cs.Lifecycle.ShutdownTime != nil {
			dur := cs.Lifecycle.ShutdownTime.Sub(d.cfg.Now())
			if dur <= 0 {
				return nil, refused("InvalidSpec", errdefs.Invalid("lifecycle.shutdownTime has passed"))
			}
			m.Req.TimeoutSeconds = (dur.Round(time.Second) + time.Second).Seconds()
		}
		return m, nil
	}
	fp := generation(obj) + "/" + generation(pool) + "/" + d.templateVersion(obj.GetNamespace(), ps.TemplateRef.Name)
	sb, err := d.create(ctx, p, obj, fp, mapping, labels)
	if err != nil {
		return nil, refusalOf(err)
	}
	return sb, d.note(ctx, ClaimGVR, obj, annotSandbox, sb.ID)
}

// adopted is the sandbox a claim's annotation names, if it is one the
// claim may have: the caller's own (the listing is owner-scoped) and of
// the claim's pool. Anything else is nil: a claim written with another
// sandbox's id in it gets nothing of it.
func (d *Door) adopted(ctx context.Context, claim, pool *unstructured.Unstructured, id string) (*sandbox.Sandbox, error) {
	return d.adoptedFrom(ctx, map[string]string{labelPoolUID: string(pool.GetUID())}, id)
}

// adoptedFrom is the sandbox id among the caller's holding labels.
func (d *Door) adoptedFrom(ctx context.Context, labels map[string]string, id string) (*sandbox.Sandbox, error) {
	sbs, err := d.owned(ctx, labels)
	if err != nil {
		return nil, err
	}
	for _, sb := range sbs {
		if sb.ID == id {
			return sb, nil
		}
	}
	return nil, nil
}

func (d *Door) remove(ctx context.Context, p auth.Principal, obj *unstructured.Unstructured, sb *sandbox.Sandbox) error {
	return d.audited(ctx, p, obj, access.SandboxDelete, sb.ID, nil, func() error {
		_, err := d.cfg.Engine.Delete(ctx, sb.ID, p.Actor, sandbox.CauseUser, "agent-sandbox "+strings.ToLower(obj.GetKind())+" "+obj.GetNamespace()+"/"+obj.GetName()+" deleted")
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil
		}
		return err
	})
}

// finalize deletes what obj made, then lets it go. Without a key that
// may delete, the finalizer stays (nothing berth made is left running
// unaccounted): the Ready condition says why.
func (d *Door) finalize(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) error {
	if !hasFinalizer(obj) {
		return nil
	}
	actx, p, err := d.principal(ctx, obj.GetNamespace())
	if err != nil {
		return d.report(ctx, gvr, obj, nil, err)
	}
	var gone []*sandbox.Sandbox
	switch gvr {
	case SandboxGVR:
		gone, err = d.owned(actx, map[string]string{labelUID: string(obj.GetUID())})
	case PoolGVR:
		gone, err = d.members(actx, obj)
	case ClaimGVR:
		var cs claimSpec
		_ = specOf(obj, &cs)
		if id := obj.GetAnnotations()[annotSandbox]; id != "" {
			// Its pool's member, by the pool's uid; with the pool gone
			// first, by the pool's name (members keep their labels).
			sel := map[string]string{labelKind: "pool-member", labelName: cs.WarmPoolRef.Name}
			if pool, perr := d.get(PoolGVR, obj.GetNamespace(), cs.WarmPoolRef.Name); perr == nil {
				sel = map[string]string{labelPoolUID: string(pool.GetUID())}
			}
			var sb *sandbox.Sandbox
			if sb, err = d.adoptedFrom(actx, sel, id); sb != nil {
				gone = append(gone, sb)
			}
		}
		if err == nil {
			var own []*sandbox.Sandbox
			own, err = d.owned(actx, map[string]string{labelUID: string(obj.GetUID())})
			for _, sb := range own {
				if len(gone) == 0 || gone[0].ID != sb.ID {
					gone = append(gone, sb)
				}
			}
		}
	}
	if err != nil {
		return err
	}
	for _, sb := range gone {
		if err := d.remove(actx, p, obj, sb); err != nil {
			return err
		}
	}
	var fs []string
	for _, f := range obj.GetFinalizers() {
		if f != Finalizer {
			fs = append(fs, f)
		}
	}
	obj.SetFinalizers(fs)
	delete(d.refusedSpecs, obj.GetUID())
	_, err = d.cfg.Dynamic.Resource(gvr).Namespace(obj.GetNamespace()).Update(ctx, obj, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func hasFinalizer(obj *unstructured.Unstructured) bool {
	for _, f := range obj.GetFinalizers() {
		if f == Finalizer {
			return true
		}
	}
	return false
}

// report writes obj's status from sb and err. A refusal is reported and
// not retried; another error is reported and retried.
func (d *Door) report(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, sb *sandbox.Sandbox, err error) error {
	cond := metav1.Condition{Type: conditionType, ObservedGeneration: obj.GetGeneration()}
	var ref *refusal
	switch {
	case errors.As(err, &ref):
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ref.reason, ref.err.Error()
	case err != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "DependenciesNotReady", err.Error()
	case sb == nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "DependenciesNotReady", "no sandbox yet"
	case sb.State == sandbox.StateRunning:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, "DependenciesReady", "berth sandbox "+sb.ID+" is running"
	default:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "DependenciesNotReady", "berth sandbox "+sb.ID+" is "+string(sb.State)
	}
	if sb != nil && cond.Status == metav1.ConditionTrue {
		var bp blueprint
		if gvr == SandboxGVR && specOf(obj, &bp) == nil {
			if m, merr := mapBlueprint(&bp, d.cfg.Templates, d.cfg.Now()); merr == nil {
				cond.Message += notServedNote(m.NotServed)
			}
		}
	}
	if len(cond.Message) > 1024 {
		cond.Message = cond.Message[:1024]
	}
	status := map[string]any{}
	if s, ok := obj.Object["status"].(map[string]any); ok {
		status = s
	}
	conds, _ := status["conditions"].([]any)
	now := metav1.NewTime(d.cfg.Now())
	cond.LastTransitionTime = now
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == conditionType && m["status"] == string(cond.Status) {
			if t, ok := m["lastTransitionTime"].(string); ok {
				if pt, perr := time.Parse(time.RFC3339, t); perr == nil {
					cond.LastTransitionTime = metav1.NewTime(pt)
				}
			}
		}
	}
	cm, _ := runtimeToMap(cond)
	status["conditions"] = []any{cm}
	var pod *corev1.Pod
	if sb != nil && d.cfg.SandboxNamespace != "" {
		pod, _ = d.cfg.Client.CoreV1().Pods(d.cfg.SandboxNamespace).Get(ctx, "berth-"+sb.ID, metav1.GetOptions{})
	}
	var ips []any
	if pod != nil {
		for _, ip := range pod.Status.PodIPs {
			ips = append(ips, ip.IP)
		}
	}
	switch gvr {
	case SandboxGVR:
		if ips != nil {
			status["podIPs"] = ips
		}
		if pod != nil {
			status["nodeName"] = pod.Spec.NodeName
			status["selector"] = "berth.sh/sandbox=" + sb.ID
		}
	case ClaimGVR:
		if sb != nil {
			s := map[string]any{"name": sb.ID}
			if ips != nil {
				s["podIPs"] = ips
			}
			status["sandbox"] = s
		}
	}
	obj.Object["status"] = status
	u, uerr := d.cfg.Dynamic.Resource(gvr).Namespace(obj.GetNamespace()).UpdateStatus(ctx, obj, metav1.UpdateOptions{})
	if uerr == nil && pod != nil && gvr == SandboxGVR && u.GetAnnotations()[annotPodName] != pod.Name {
		uerr = d.note(ctx, gvr, u, annotPodName, pod.Name)
	}
	if err != nil && ref == nil {
		return err
	}
	return uerr
}

func (d *Door) poolStatus(ctx context.Context, obj *unstructured.Unstructured, n, readyN int) error {
	obj.Object["status"] = map[string]any{"replicas": int64(n), "readyReplicas": int64(readyN),
		"selector": labelPoolUID + "=" + string(obj.GetUID()), "observedGeneration": obj.GetGeneration()}
	_, err := d.cfg.Dynamic.Resource(PoolGVR).Namespace(obj.GetNamespace()).UpdateStatus(ctx, obj, metav1.UpdateOptions{})
	return err
}

func everything() labels.Selector { return labels.Everything() }

// runtimeToMap converts a typed value to its unstructured form.
func runtimeToMap(c metav1.Condition) (map[string]any, error) {
	return runtime.DefaultUnstructuredConverter.ToUnstructured(&c)
}
