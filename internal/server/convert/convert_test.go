package convert

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"reflect"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/netrules"
	"github.com/berth-sh/berth/internal/engine/pools"
	"github.com/berth-sh/berth/internal/engine/reconcile"
	"github.com/berth-sh/berth/internal/engine/templates"
	"github.com/berth-sh/berth/internal/image"
	"github.com/berth-sh/berth/internal/leader"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/input"
)

// fill sets every field of the value v points to, recursively, to a
// distinct non-zero value that survives seconds ⇄ Duration exactly
// (floats are a whole number of seconds plus a half).
func fill(t *testing.T, v reflect.Value, n *int) {
	t.Helper()
	*n++
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Unix(int64(*n), 0).UTC()))
			return
		}
		for i := range v.NumField() {
			fill(t, v.Field(i), n)
		}
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		if v.Type() == reflect.TypeOf(time.Duration(0)) {
			v.SetInt(int64(*n)*int64(time.Second) + int64(time.Second/2))
			return
		}
		v.SetInt(int64(*n))
	case reflect.Uint, reflect.Uint64, reflect.Uint32, reflect.Uint16, reflect.Uint8:
		v.SetUint(uint64(*n))
	case reflect.Float64:
		v.SetFloat(float64(*n) + 0.5)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(t, s.Index(0), n)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k, n)
		fill(t, e, n)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(t, p.Elem(), n)
		v.Set(p)
	default:
		t.Fatalf("fill: no rule for %s", v.Type())
	}
}

// zeroFields names the fields of v (recursively) left at their zero value.
func zeroFields(v reflect.Value, path string, skip map[string]bool) []string {
	if skip[path] {
		return nil
	}
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return []string{path}
		}
		v = v.Elem()
	}
	if v.Kind() == reflect.Struct && v.Type() != reflect.TypeOf(time.Time{}) {
		var out []string
		for i := range v.NumField() {
			out = append(out, zeroFields(v.Field(i), path+"."+v.Type().Field(i).Name, skip)...)
		}
		return out
	}
	if v.IsZero() {
		return []string{path}
	}
	return nil
}

func filled[T any](t *testing.T) *T {
	var x T
	n := 0
	fill(t, reflect.ValueOf(&x).Elem(), &n)
	return &x
}

// A request converted to the engine's type loses nothing: every field of
// both sides is set, and converting back (here, in the test) gives the
// request again. A field added to an API request type and not converted,
// or to an engine type and not filled, fails here.
func TestConvertRequests(t *testing.T) {
	check := func(name string, in, out, back any) {
		t.Helper()
		// The E2B door's own fields, not in berth's requests:
		// AllPortsPublic (allowPublicTraffic: berth's ports keep their
		// token default), MaskRequestHost (maskRequestHost), and a rules
		// update's Replace (updateNetwork replaces; REST's adds and
		// removes), and a template service's ReadyPort (a template build's
		// setStartCmd with waitForPort; berth's own services have none),
		// and KeepCreateLease (E2B's pause without memory keeps the SDK's
		// envd token through the stop; berth's leases end at a stop),
		// and SudoWhereOffered (E2B's sandboxes have sudo where the class
		// offers it; a REST create asks for it with sudo, or is refused).
		door := map[string]bool{"create.AllPortsPublic": true, "create.MaskRequestHost": true, "network rules.Replace": true,
			"import.Service.ReadyPort": true, "build.Service.ReadyPort": true, "create.KeepCreateLease": true,
			"create.SudoWhereOffered": true}
		if z := zeroFields(reflect.ValueOf(out), name, door); len(z) > 0 {
			t.Errorf("%s: engine fields not converted: %v", name, z)
		}
		if !reflect.DeepEqual(in, back) {
			t.Errorf("%s: round trip\n got %+v\nwant %+v", name, back, in)
		}
	}
	{
		in := filled[api.CreateSandboxRequest](t)
		out := CreateRequest(in)
		check("create", in, out, createToAPI(out))
	}
	{
		in := filled[api.ExecRequest](t)
		out := ExecRequest(in)
		check("exec", in, out, &api.ExecRequest{Cmd: out.Cmd, Env: out.Env, Workdir: out.Workdir, User: out.User,
			Stdin: out.Stdin, TimeoutSeconds: out.Timeout.Seconds(), TTY: out.TTY, Rows: out.Rows, Cols: out.Cols})
	}
	{
		in := filled[api.ForkRequest](t)
		out := ForkRequest(in)
		check("fork", in, out, &api.ForkRequest{Count: out.Count, Persistent: out.Persistent,
			TimeoutSeconds: out.Timeout.Seconds(), Labels: out.Labels, Env: out.Env, NamePrefix: out.NamePrefix})
	}
	{
		in := filled[api.CreateSnapshotRequest](t)
		out := SnapshotRequest(in)
		check("snapshot", in, out, &api.CreateSnapshotRequest{Name: out.Name, RetentionSeconds: out.Retention.Seconds()})
	}
	{
		in := filled[api.CopyRequest](t)
		out := CopyRequest(in)
		check("copy", in, out, &api.CopyRequest{From: out.From, FromPath: out.FromPath, To: out.To, ToPath: out.ToPath,
			PreserveOwner: out.PreserveOwner})
	}
	{
		in := filled[api.CreateVolumeRequest](t)
		out := VolumeRequest(in)
		check("volume", in, out, &api.CreateVolumeRequest{Name: out.Name, SizeBytes: out.SizeBytes, Inodes: out.Inodes})
	}
	{
		in := filled[api.NetworkRulesRequest](t)
		out := RulesRequest(in)
		check("network rules", in, out, &api.NetworkRulesRequest{Allow: out.Allow, Deny: out.Deny})
	}
	{
		in := filled[api.ImportTemplateRequest](t)
		out := ImportRequest(in)
		check("import", in, out, &api.ImportTemplateRequest{Name: out.Name, Path: out.Path, Ref: out.Ref, Insecure: out.Insecure,
			RegistryAuth: &api.RegistryAuth{Username: out.Auth.Username, Password: out.Auth.Password, Token: out.Auth.Token},
			Service: &api.TemplateService{Cmd: out.Service.Cmd, FromImage: out.Service.FromImage, Restart: out.Service.Restart,
				MaxRestarts: out.Service.MaxRestarts}})
	}
	{
		in := filled[api.BuildTemplateRequest](t)
		out := BuildRequest(in)
		check("build", in, out, &api.BuildTemplateRequest{Name: out.Name, From: out.From, Run: out.Run, Env: out.Env,
			TimeoutSeconds: out.Timeout.Seconds(), Network: out.Network, Allow: out.Allow,
			Service: &api.TemplateService{Cmd: out.Service.Cmd, FromImage: out.Service.FromImage, Restart: out.Service.Restart,
				MaxRestarts: out.Service.MaxRestarts}})
	}
	{
		in := filled[api.ApplyRequest](t)
		out := ApplyRequest(in)
		check("apply", in, out, &api.ApplyRequest{Spec: out.Spec, Files: out.Files})
	}
	{
		in := filled[api.Resize](t)
		out := Resize(*in)
		check("resize", in, &out, &api.Resize{Rows: out.Rows, Cols: out.Cols})
	}
}

func createToAPI(r *engine.CreateRequest) *api.CreateSandboxRequest {
	out := &api.CreateSandboxRequest{
		Name: r.Name, Template: r.Template, Image: r.Image, ImageInsecure: r.ImageInsecure, Persistent: r.Persistent,
		Resources: api.Resources{CPUs: r.Resources.CPUs, MemoryBytes: r.Resources.MemoryBytes,
			Pids: r.Resources.Pids, DiskBytes: r.Resources.DiskBytes},
		Env: r.Env, Labels: r.Labels, TimeoutSeconds: r.Timeout.Seconds(),
		Network: r.Network, Runtime: r.Runtime, Workdir: r.Workdir, User: r.User,
		PersistRoot: r.PersistRoot, VolumeSizeBytes: r.VolumeSizeBytes, VolumeInodes: r.VolumeInodes,
		KeepVolume: r.KeepVolume, Snapshot: r.Snapshot, Allow: r.Allow, PublicPorts: r.PublicPorts, Sudo: r.Sudo,
		Policy:       PolicyToAPI(r.Policy),
		RegistryAuth: registryAuthToAPI(r.RegistryAuth),
	}
	for _, v := range r.Volumes {
		out.Volumes = append(out.Volumes, api.VolumeMount{Name: v.Name, Path: v.Path, ReadOnly: v.ReadOnly})
	}
	for _, s := range r.Secrets {
		out.Secrets = append(out.Secrets, api.SecretRef{Name: s.Name, Env: s.Env, File: s.File, EgressHost: s.EgressHost})
	}
	return out
}

// A result converted to the API's type loses nothing: every API field is
// set (but those the server fills itself), and converting back gives the
// engine's value again.
func TestConvertResults(t *testing.T) {
	check := func(name string, in, out, back any, skip ...string) {
		t.Helper()
		sk := map[string]bool{}
		for _, s := range skip {
			sk[name+"."+s] = true
		}
		if z := zeroFields(reflect.ValueOf(out), name, sk); len(z) > 0 {
			t.Errorf("%s: API fields not converted: %v", name, z)
		}
		if !reflect.DeepEqual(in, back) {
			t.Errorf("%s: round trip\n got %+v\nwant %+v", name, back, in)
		}
	}
	{
		in := filled[engine.Exit](t)
		in.Duration = 1234567 * time.Microsecond
		out := ExitToAPI(*in)
		check("exit", in, &out, &engine.Exit{Code: out.Code, Signal: out.Signal, TimedOut: out.TimedOut,
			OOMKilled: out.OOMKilled, Duration: time.Duration(out.DurationMS * float64(time.Millisecond))})
	}
	{
		in := filled[engine.FileInfo](t)
		// Xattrs are the E2B door's file metadata (user.e2b.*), which
		// berth's own file info does not carry.
		in.Xattrs = nil
		out := FileInfoToAPI(*in)
		check("file info", in, &out, &engine.FileInfo{Name: out.Name, Path: out.Path, Size: out.Size, Mode: out.Mode,
			ModTime: out.ModTime, IsDir: out.IsDir, Link: out.Link, UID: out.UID, GID: out.GID})
		// The POSIX view is derived from the mode.
		if m := fs.FileMode(in.Mode); out.Permissions != api.PosixPermissions(m) || out.ModeString != api.ModeString(m) || out.Type != api.FileType(m) {
			t.Errorf("file info POSIX view %d %q %q for mode %v", out.Permissions, out.ModeString, out.Type, m)
		}
	}
	{
		in := filled[engine.DiffEntry](t)
		out := DiffToAPI(*in)
		check("diff", in, &out, &engine.DiffEntry{Path: out.Path, Kind: out.Kind, Size: out.Size, Dir: out.Dir})
	}
	{
		in := filled[engine.Isolation](t)
		out := IsolationToAPI(*in)
		check("isolation", in, &out, &engine.Isolation{Runtime: out.Runtime, SharedKernel: out.SharedKernel,
			UserNamespace: out.UserNamespace, Seccomp: out.Seccomp, Capabilities: out.Capabilities, NoNewPrivs: out.NoNewPrivs,
			ReadonlyImage: out.ReadonlyImage, IDMode: out.IDMode, HostUID: out.HostUID, HostGID: out.HostGID,
			HostIDs: out.HostIDs, UsernsOwner: out.UsernsOwner})
	}
	{
		in := filled[engine.Disk](t)
		out := DiskToAPI(in)
		check("disk", in, out, &engine.Disk{CapBytes: out.CapBytes, CapInodes: out.CapInodes, UsedBytes: out.UsedBytes,
			UsedInodes: out.UsedInodes, Enforced: out.Enforced, Note: out.Note, ReadOnly: out.ReadOnly})
	}
	{
		in := filled[netrules.NetworkRules](t)
		out := RulesToAPI(in)
		check("network rules", in, out, &netrules.NetworkRules{Mode: out.Mode, IPv4: out.IPv4, IPv6: out.IPv6, Allow: out.Allow})
	}
	{
		in := filled[netrules.Flow](t)
		out := FlowToAPI(*in)
		check("flow", in, &out, &netrules.Flow{Seq: out.Seq, Time: out.Time, Kind: out.Kind, Proto: out.Proto, Src: out.Src,
			Dst: out.Dst, Name: out.Name, Decision: out.Decision, Rule: out.Rule})
	}
	{
		in := filled[pools.Pool](t)
		out := PoolPtrToAPI(in)
		check("pool", in, out, &pools.Pool{Tenant: out.Tenant, Template: out.Template, Min: out.Min, Ready: out.Ready, Starting: out.Starting,
			Hits: out.Hits, Misses: out.Misses, Reason: out.Reason, Auto: out.Auto})
	}
	{
		in := filled[templates.Event](t)
		out := BuildEventToAPI(*in)
		check("build event", in, &out, &templates.Event{Step: out.Step, Stream: out.Stream, Data: out.Data},
			"Template", "Error")
	}
	{
		in := filled[reconcile.Report](t)
		out := DoctorToAPI(in)
		back := &reconcile.Report{Runtime: out.Runtime, Healthy: out.Healthy}
		for _, f := range out.Findings {
			back.Findings = append(back.Findings, reconcile.Finding{Kind: f.Kind, ID: f.ID, Detail: f.Detail, Fixed: f.Fixed, Error: f.Error})
		}
		for _, l := range out.Leases {
			back.Leases = append(back.Leases, leader.Status{Name: l.Name, Holder: l.Holder, Self: l.Self, Held: l.Held,
				Epoch: l.Epoch, Remaining: time.Duration(l.RemainingMillis) * time.Millisecond, Trivial: l.Trivial, Error: l.Error})
		}
		check("doctor", in, out, back)
	}
	{
		in := filled[sandbox.Policy](t)
		out := PolicyToAPI(*in)
		check("policy", in, &out, ptr(Policy(out)))
	}
}

func ptr[T any](v T) *T { return &v }

// nil stays nil and empty stays empty, so responses encode as before.
func TestConvertSlices(t *testing.T) {
	if Slice([]netrules.Flow(nil), FlowToAPI) != nil {
		t.Error("nil became non-nil")
	}
	if b, _ := json.Marshal(Slice([]netrules.Flow{}, FlowToAPI)); string(b) != "[]" {
		t.Errorf("empty encodes as %s", b)
	}
	if b, _ := json.Marshal(DoctorToAPI(&reconcile.Report{Findings: []reconcile.Finding{}})); string(b) !=
		`{"findings":[],"runtime":"","healthy":false}` {
		t.Errorf("doctor encodes as %s", b)
	}
}

// Durations: a positive number of seconds never becomes "none", and
// numbers past a Duration saturate rather than wrap.
func TestSeconds(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want time.Duration
	}{{0, 0}, {1.5, 1500 * time.Millisecond}, {1e-12, 1}, {-1, -time.Second}, {1e300, 1<<63 - 1}, {-1e300, -1 << 63}} {
		if got := Seconds(c.v); got != c.want {
			t.Errorf("Seconds(%g) = %d, want %d", c.v, got, c.want)
		}
	}
	if got := input.TimeoutSeconds(1e-12); got != 0 {
		t.Errorf("exec timeout 1e-12s = %d, want none", got)
	}
}

// An exit and a file info from the agent, through the engine, encode as
// the agent's wire did (the API and the wire share names today).
func TestWireThroughEngine(t *testing.T) {
	same := func(name string, a, b any) {
		t.Helper()
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if string(ja) != string(jb) {
			t.Errorf("%s: %s converted to %s", name, ja, jb)
		}
	}
	ex := agent.Exit{Code: 137, Signal: "SIGKILL", TimedOut: true, OOMKilled: true, DurationMS: 1.5}
	same("exit", ex, ExitToAPI(engine.Exit{Code: 137, Signal: "SIGKILL", TimedOut: true, OOMKilled: true, Duration: 1500 * time.Microsecond}))
}

func registryAuthToAPI(a *image.RequestAuth) *api.RegistryAuth {
	if a == nil {
		return nil
	}
	return &api.RegistryAuth{Username: a.Username, Password: a.Password, Token: a.Token}
}
