// Package sandboxes serves the routes of a sandbox's record and life:
// create, list, read and delete; pause, resume, stop, start, reset,
// quarantine, release, touch, hibernate and wake; fork and snapshots;
// volumes; the filesystem diff; and the egress rules and flows. The
// routes are mounted, each with its rule, by the root package server's
// route table; exec, processes and files are packages exec and files.
package sandboxes

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/netrules"
	"github.com/berth-sh/berth/internal/engine/snapshots"
	"github.com/berth-sh/berth/internal/engine/volumes"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/convert"
	"github.com/berth-sh/berth/internal/server/idempotency"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
)

// Engine is what the sandbox routes need of the engine, by concern.
type Engine interface {
	Records
	Lifecycle
	Snapshots
	Volumes
	Network
}

// Records is a sandbox's record and what its API form shows.
type Records interface {
	Create(ctx context.Context, req *engine.CreateRequest, opt engine.CreateOptions) (*sandbox.Sandbox, error)
	List(ctx context.Context, all bool, p store.Page) ([]*sandbox.Sandbox, string, error)
	Get(ctx context.Context, ref string) (*sandbox.Sandbox, error)
	Delete(ctx context.Context, ref, actor string, cause sandbox.Cause, reason string) (*sandbox.Sandbox, error)
	Children(ctx context.Context, id string) []string
	Isolation(sb *sandbox.Sandbox) engine.Isolation
	LastActivity(sb *sandbox.Sandbox) time.Time
	DiskUsage(sb *sandbox.Sandbox) *engine.Disk
	Store() store.Store
}

// Lifecycle is the state changes of POST /v1/sandboxes/{id}/{op}.
type Lifecycle interface {
	Pause(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error)
	Resume(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error)
	Stop(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error)
	StopGrace(ctx context.Context, ref, actor string, grace time.Duration) (*sandbox.Sandbox, error)
	Start(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error)
	Reset(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error)
	Quarantine(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error)
	Release(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error)
	Touch(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error)
	Hibernate(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error)
	Wake(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error)
	Diff(ctx context.Context, ref string) ([]engine.DiffEntry, error)
}

// Snapshots is fork and the snapshot routes'.
type Snapshots interface {
	Fork(ctx context.Context, ref string, req *snapshots.ForkRequest, actor string, ids ...string) ([]*sandbox.Sandbox, time.Duration, error)
	CreateSnapshot(ctx context.Context, ref string, req *snapshots.SnapshotRequest, actor string, ids ...string) (*store.Snapshot, error)
	ListSnapshots(ctx context.Context, ref string, p store.Page) ([]*store.Snapshot, string, error)
	GetSnapshot(ctx context.Context, ref string) (*store.Snapshot, error)
	DeleteSnapshot(ctx context.Context, ref string) error
	RestoreSnapshot(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error)
}

// Volumes is the volume routes'.
type Volumes interface {
	CreateVolume(ctx context.Context, req *volumes.CreateRequest, tenant string) (*store.Volume, error)
	ListVolumes(ctx context.Context, all bool, p store.Page) ([]*store.Volume, string, error)
	GetVolume(ctx context.Context, ref string) (*store.Volume, error)
	DeleteVolume(ctx context.Context, ref string) error
	VolumeUsage(v *store.Volume) node.VolumeUsage
}

// Network is a sandbox's egress rules and flows.
type Network interface {
	NetworkRules(ctx context.Context, ref string) (*netrules.NetworkRules, error)
	UpdateNetworkRules(ctx context.Context, ref string, req *netrules.Request, actor string) (*netrules.NetworkRules, error)
	Flows(ctx context.Context, ref string, after uint64, limit int) ([]netrules.Flow, error)
}

// Handlers serves the sandbox routes.
type Handlers struct {
	E Engine
	// Created and Deleted count the sandboxes made and deleted here.
	Created, Deleted prometheus.Counter
	// CreateLease mints the create-time lease a create returns ("": none).
	CreateLease func(ctx context.Context, sb *sandbox.Sandbox, creator auth.Principal) (string, error)
}

// ToAPI converts a sandbox record to its API form.
func (h *Handlers) ToAPI(sb *sandbox.Sandbox) api.Sandbox {
	out := api.Sandbox{
		ID: sb.ID, Name: sb.Name, Template: sb.Spec.Template, State: string(sb.State),
		Persistent: sb.Spec.Persistent,
		Resources: api.Resources{CPUs: sb.Spec.Resources.CPUs, MemoryBytes: sb.Spec.Resources.MemoryBytes,
			Pids: sb.Spec.Resources.Pids, DiskBytes: sb.Spec.Resources.DiskBytes},
		Env: sb.Spec.Env, Labels: sb.Spec.Labels, TimeoutSeconds: sb.Spec.Timeout.Seconds(),
		Network: sb.Spec.Network, Workdir: sb.Spec.Workdir, User: sb.Spec.User, Isolation: convert.IsolationToAPI(h.E.Isolation(sb)),
		CreatedAt: sb.CreatedAt, UpdatedAt: sb.UpdatedAt, Cause: string(sb.Cause), Reason: sb.Reason,
		Error: sb.Error,
	}
	if !sb.StartedAt.IsZero() {
		t := sb.StartedAt
		out.StartedAt = &t
	}
	if d, ok := sb.Deadline(); ok && sb.State != sandbox.StateDeleted {
		out.ExpiresAt = &d
	}
	if !sb.DeletedAt.IsZero() {
		t := sb.DeletedAt
		out.DeletedAt = &t
	}
	out.Hostname = sb.Hostname()
	out.IPv4, out.IPv6, out.Allow, out.PublicPorts = sb.Spec.IPv4, sb.Spec.IPv6, sb.Spec.Allow, sb.Spec.PublicPorts
	for _, r := range sb.Spec.Secrets {
		out.Secrets = append(out.Secrets, api.SecretRef{Name: r.Name, Env: r.Env, File: r.File, EgressHost: r.EgressHost})
	}
	out.PersistRoot, out.KeepVolume, out.Sudo = sb.Spec.PersistRoot, sb.Spec.KeepVolume, sb.Spec.Sudo
	for _, vm := range sb.Spec.Volumes {
		out.Volumes = append(out.Volumes, api.VolumeMount{Name: vm.Name, Path: vm.Path, ReadOnly: vm.ReadOnly})
	}
	p := sb.Spec.Policy
	out.Policy = convert.PolicyToAPI(p)
	out.LastActivityAt = convert.TimePtr(h.E.LastActivity(sb))
	out.PausedAt, out.StoppedAt = convert.TimePtr(sb.PausedAt), convert.TimePtr(sb.StoppedAt)
	if due, ok := sandbox.Next(sb, h.E.LastActivity(sb)); ok {
		out.NextAction, out.NextActionAt = string(due.Action)+" ("+due.Policy+")", convert.TimePtr(due.At)
	}
	out.Disk = convert.DiskToAPI(h.E.DiskUsage(sb))
	if sb.Spec.Parent != "" || sb.Spec.FromSnapshot != "" {
		out.Lineage = &api.Lineage{Parent: sb.Spec.Parent, FromSnapshot: sb.Spec.FromSnapshot}
	}
	if sb.State.Live() {
		for _, vm := range sb.Spec.Volumes {
			if vm.Owned {
				if v, err := h.E.Store().GetVolume(context.Background(), store.AnyOwner, vm.VolumeID); err == nil {
					av := h.VolumeToAPI(v)
					out.Storage = &av
				}
			}
		}
	}
	return out
}

// Create serves POST /v1/sandboxes.
func (h *Handlers) Create(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSandboxRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	sb, err := h.E.Create(r.Context(), convert.CreateRequest(&req), engine.CreateOptions{Actor: rest.Actor(r), Tenant: rest.Tenant(r),
		ID: idempotency.ID(r), Reserve: idempotency.Reserve(r)})
	if err != nil {
		rest.Error(w, err)
		return
	}
	h.Created.Inc()
	out := h.ToAPI(sb)
	if out.LeaseToken, err = h.CreateLease(r.Context(), sb, rest.Principal(r)); err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, http.StatusCreated, out)
}

// List serves GET /v1/sandboxes.
func (h *Handlers) List(w http.ResponseWriter, r *http.Request) {
	all, _ := strconv.ParseBool(r.URL.Query().Get("all"))
	p, err := rest.PageOf(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	// A page may hold fewer than limit: warm-pool members are left out.
	sbs, next, err := h.E.List(r.Context(), all, p)
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.SetNext(w, next)
	out := make([]api.Sandbox, 0, len(sbs))
	for _, sb := range sbs {
		if sb.Spec.Pool != "" {
			continue // unclaimed warm-pool members are not anyone's sandboxes
		}
		out = append(out, h.ToAPI(sb))
	}
	rest.JSON(w, 200, out)
}

// Get serves GET /v1/sandboxes/{id}.
func (h *Handlers) Get(w http.ResponseWriter, r *http.Request) {
	sb, err := h.E.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	out := h.ToAPI(sb)
	if kids := h.E.Children(r.Context(), sb.ID); len(kids) > 0 {
		if out.Lineage == nil {
			out.Lineage = &api.Lineage{}
		}
		out.Lineage.Children = kids
	}
	rest.JSON(w, 200, out)
}

// Delete serves DELETE /v1/sandboxes/{id}.
func (h *Handlers) Delete(w http.ResponseWriter, r *http.Request) {
	sb, err := h.E.Delete(r.Context(), r.PathValue("id"), rest.Actor(r), sandbox.CauseUser, "deleted by user")
	if err != nil {
		rest.Error(w, err)
		return
	}
	h.Deleted.Inc()
	rest.JSON(w, 200, h.ToAPI(sb))
}
