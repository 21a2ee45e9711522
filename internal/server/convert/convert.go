// Package convert is where the HTTP API's JSON types (package api) become
// the engine's and back: the only place, so a field added on one side and
// forgotten on the other is one file to read (convert_test.go fails when a
// field of either side is not converted). A nil slice stays nil and an
// empty one empty, so a response encodes as it did.
package convert

import (
	"io/fs"
	"math"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/netrules"
	"github.com/berth-sh/berth/internal/engine/pools"
	"github.com/berth-sh/berth/internal/engine/reconcile"
	"github.com/berth-sh/berth/internal/engine/snapshots"
	"github.com/berth-sh/berth/internal/engine/templates"
	"github.com/berth-sh/berth/internal/engine/volumes"
	"github.com/berth-sh/berth/internal/image"
	"github.com/berth-sh/berth/internal/leader"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/input"
)

// Seconds converts a duration in the API's seconds. A positive value stays
// positive (below a nanosecond it becomes one), so the engine still refuses
// it as under 1ms rather than reading it as "none"; values past what a
// Duration holds saturate, and the engine refuses them as out of range.
func Seconds(v float64) time.Duration {
	d := v * float64(time.Second)
	switch {
	case math.IsNaN(d) || d >= math.MaxInt64:
		return math.MaxInt64
	case d <= math.MinInt64:
		return math.MinInt64
	case v > 0 && d < 1:
		return 1
	}
	return time.Duration(d)
}

// TimePtr is t, or nil for the zero time (omitted from the JSON).
func TimePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Slice converts each element of in with f (nil stays nil).
func Slice[T, U any](in []T, f func(T) U) []U {
	if in == nil {
		return nil
	}
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

func CreateRequest(r *api.CreateSandboxRequest) *engine.CreateRequest {
	return &engine.CreateRequest{
		Name: r.Name, Template: r.Template, Image: r.Image, ImageInsecure: r.ImageInsecure, RegistryAuth: RegistryAuth(r.RegistryAuth),
		Persistent: r.Persistent,
		Resources: sandbox.Resources{CPUs: r.Resources.CPUs, MemoryBytes: r.Resources.MemoryBytes,
			Pids: r.Resources.Pids, DiskBytes: r.Resources.DiskBytes},
		Env: r.Env, Labels: r.Labels, Timeout: Seconds(r.TimeoutSeconds),
		Network: r.Network, Runtime: r.Runtime, Workdir: r.Workdir, User: r.User,
		PersistRoot: r.PersistRoot, VolumeSizeBytes: r.VolumeSizeBytes, VolumeInodes: r.VolumeInodes,
		Volumes: Slice(r.Volumes, func(v api.VolumeMount) engine.VolumeRequest {
			return engine.VolumeRequest{Name: v.Name, Path: v.Path, ReadOnly: v.ReadOnly}
		}),
		KeepVolume: r.KeepVolume, Snapshot: r.Snapshot, Allow: r.Allow, PublicPorts: r.PublicPorts, Sudo: r.Sudo,
		Secrets: Slice(r.Secrets, func(s api.SecretRef) sandbox.SecretRef {
			return sandbox.SecretRef{Name: s.Name, Env: s.Env, File: s.File, EgressHost: s.EgressHost}
		}),
		Policy: Policy(r.Policy),
	}
}

func Policy(p api.Policy) sandbox.Policy {
	return sandbox.Policy{
		IdleTimeout: Seconds(p.IdleTimeoutSeconds), OnIdle: sandbox.Action(p.OnIdle),
		MaxAge: Seconds(p.MaxAgeSeconds), OnMaxAge: sandbox.Action(p.OnMaxAge),
		Retention: Seconds(p.RetentionSeconds), AutoResume: p.AutoResume, IdleCPUThreshold: p.IdleCPUThreshold,
	}
}

func PolicyToAPI(p sandbox.Policy) api.Policy {
	return api.Policy{
		IdleTimeoutSeconds: p.IdleTimeout.Seconds(), OnIdle: string(p.OnIdle),
		MaxAgeSeconds: p.MaxAge.Seconds(), OnMaxAge: string(p.OnMaxAge),
		RetentionSeconds: p.Retention.Seconds(), AutoResume: p.AutoResume, IdleCPUThreshold: p.IdleCPUThreshold,
	}
}

func ExecRequest(r *api.ExecRequest) *engine.ExecRequest { return input.ExecRequest(r) }

// ExitToAPI: the engine's wall time is whole microseconds, as the agent
// measures it.
func ExitToAPI(e engine.Exit) api.ExecExit {
	return api.ExecExit{Code: e.Code, Signal: e.Signal, TimedOut: e.TimedOut, OOMKilled: e.OOMKilled,
		DurationMS: float64(e.Duration.Microseconds()) / 1000}
}

func Resize(r api.Resize) engine.Resize { return engine.Resize{Rows: r.Rows, Cols: r.Cols} }

func FileInfoToAPI(fi engine.FileInfo) api.FileInfo {
	m := fs.FileMode(fi.Mode)
	return api.FileInfo{Name: fi.Name, Path: fi.Path, Size: fi.Size, Mode: fi.Mode, ModTime: fi.ModTime,
		IsDir: fi.IsDir, Link: fi.Link, Permissions: api.PosixPermissions(m), ModeString: api.ModeString(m),
		Type: api.FileType(m), UID: fi.UID, GID: fi.GID}
}

func DiffToAPI(d engine.DiffEntry) api.DiffEntry {
	return api.DiffEntry{Path: d.Path, Kind: d.Kind, Size: d.Size, Dir: d.Dir}
}

// ClassesToAPI lists the runtime classes and what each can do.
func ClassesToAPI(cls []node.Class) []api.RuntimeClass {
	out := make([]api.RuntimeClass, 0, len(cls))
	for _, c := range cls {
		out = append(out, api.RuntimeClass{Name: c.Name, Capabilities: api.RuntimeCaps{
			Freeze: c.Caps.Freeze, Checkpoint: c.Caps.Checkpoint, Capture: c.Caps.Capture,
			RootLayer: c.Caps.RootLayer, Egress: c.Caps.Egress, Pool: c.Caps.Pool, Rename: c.Caps.Rename,
			Sudo: c.Caps.Sudo}})
	}
	return out
}

func IsolationToAPI(i engine.Isolation) api.Isolation {
	return api.Isolation{Runtime: i.Runtime, SharedKernel: i.SharedKernel, UserNamespace: i.UserNamespace,
		Seccomp: i.Seccomp, Capabilities: i.Capabilities, NoNewPrivs: i.NoNewPrivs, ReadonlyImage: i.ReadonlyImage,
		IDMode: i.IDMode, HostUID: i.HostUID, HostGID: i.HostGID, HostIDs: i.HostIDs, UsernsOwner: i.UsernsOwner}
}

func DiskToAPI(d *engine.Disk) *api.Disk {
	if d == nil {
		return nil
	}
	return &api.Disk{CapBytes: d.CapBytes, CapInodes: d.CapInodes, UsedBytes: d.UsedBytes, UsedInodes: d.UsedInodes,
		Enforced: d.Enforced, Note: d.Note, ReadOnly: d.ReadOnly}
}

func ForkRequest(r *api.ForkRequest) *snapshots.ForkRequest {
	return &snapshots.ForkRequest{Count: r.Count, Persistent: r.Persistent, Timeout: Seconds(r.TimeoutSeconds),
		Labels: r.Labels, Env: r.Env, NamePrefix: r.NamePrefix}
}

func SnapshotRequest(r *api.CreateSnapshotRequest) *snapshots.SnapshotRequest {
	return &snapshots.SnapshotRequest{Name: r.Name, Retention: Seconds(r.RetentionSeconds)}
}

func CopyRequest(r *api.CopyRequest) *snapshots.CopyRequest {
	return &snapshots.CopyRequest{From: r.From, FromPath: r.FromPath, To: r.To, ToPath: r.ToPath, PreserveOwner: r.PreserveOwner}
}

func VolumeRequest(r *api.CreateVolumeRequest) *volumes.CreateRequest {
	return &volumes.CreateRequest{Name: r.Name, SizeBytes: r.SizeBytes, Inodes: r.Inodes}
}

func RulesRequest(r *api.NetworkRulesRequest) *netrules.Request {
	return &netrules.Request{Allow: r.Allow, Deny: r.Deny}
}

func RulesToAPI(n *netrules.NetworkRules) *api.NetworkRules {
	if n == nil {
		return nil
	}
	return &api.NetworkRules{Mode: n.Mode, IPv4: n.IPv4, IPv6: n.IPv6, Allow: n.Allow}
}

func FlowToAPI(f netrules.Flow) api.Flow {
	return api.Flow{Seq: f.Seq, Time: f.Time, Kind: f.Kind, Proto: f.Proto, Src: f.Src, Dst: f.Dst,
		Name: f.Name, Decision: f.Decision, Rule: f.Rule}
}

func PoolToAPI(p pools.Pool) api.Pool {
	return api.Pool{Tenant: p.Tenant, Template: p.Template, Min: p.Min, Ready: p.Ready, Starting: p.Starting, Hits: p.Hits, Misses: p.Misses,
		Reason: p.Reason, Auto: p.Auto}
}

func PoolPtrToAPI(p *pools.Pool) *api.Pool {
	if p == nil {
		return nil
	}
	out := PoolToAPI(*p)
	return &out
}

func ImportRequest(r *api.ImportTemplateRequest) *templates.ImportRequest {
	out := &templates.ImportRequest{Name: r.Name, Path: r.Path, Ref: r.Ref, Insecure: r.Insecure, Auth: RegistryAuth(r.RegistryAuth)}
	if s := r.Service; s != nil {
		out.Service = &templates.ServiceRequest{Cmd: s.Cmd, FromImage: s.FromImage, Restart: s.Restart, MaxRestarts: s.MaxRestarts}
	}
	return out
}

// BuildRequest: a step's timeout is an exec's.
func BuildRequest(r *api.BuildTemplateRequest) *templates.BuildRequest {
	out := &templates.BuildRequest{Name: r.Name, From: r.From, Run: r.Run, Env: r.Env, Timeout: input.TimeoutSeconds(r.TimeoutSeconds),
		Network: r.Network, Allow: r.Allow}
	if s := r.Service; s != nil {
		out.Service = &templates.ServiceRequest{Cmd: s.Cmd, FromImage: s.FromImage, Restart: s.Restart, MaxRestarts: s.MaxRestarts}
	}
	return out
}

func ApplyRequest(r *api.ApplyRequest) *templates.ApplyRequest {
	return &templates.ApplyRequest{Spec: r.Spec, Files: r.Files}
}

// BuildEventToAPI is a progress event; the stream's last event (the
// template or the error) is the server's own.
func BuildEventToAPI(e templates.Event) api.BuildEvent {
	return api.BuildEvent{Step: e.Step, Stream: e.Stream, Data: e.Data}
}

func DoctorToAPI(r *reconcile.Report) *api.DoctorReport {
	if r == nil {
		return nil
	}
	return &api.DoctorReport{Runtime: r.Runtime, Healthy: r.Healthy,
		Findings: Slice(r.Findings, func(f reconcile.Finding) api.DoctorFinding {
			return api.DoctorFinding{Kind: f.Kind, ID: f.ID, Detail: f.Detail, Fixed: f.Fixed, Error: f.Error}
		}),
		Leases: Slice(r.Leases, func(l leader.Status) api.DoctorLease {
			return api.DoctorLease{Name: l.Name, Holder: l.Holder, Self: l.Self, Held: l.Held, Epoch: l.Epoch,
				RemainingMillis: l.Remaining.Milliseconds(), Trivial: l.Trivial, Error: l.Error}
		})}
}

// RegistryAuth is a request's registry account (nil: none given).
func RegistryAuth(a *api.RegistryAuth) *image.RequestAuth {
	if a == nil {
		return nil
	}
	return &image.RequestAuth{Username: a.Username, Password: a.Password, Token: a.Token}
}
