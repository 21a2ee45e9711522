package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// testOwnerIsolation: every read of an owned object takes the owner it
// reads for; another owner's object is not found, and lists leave it out.
func testOwnerIsolation(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, tenant := range []string{"", "acme"} {
		id := "sb-" + tenant
		must(t, s.CreateSandbox(ctx, newSandbox(id, tenant, "same", sandbox.StateRunning, at(0)),
			&sandbox.Event{Type: "state", To: sandbox.StateRunning}))
		must(t, s.AppendFlows(ctx, []*store.Flow{{SandboxID: id, ID: 1, Kind: "dns", Decision: "deny"}}, 0))
		must(t, s.CreateVolume(ctx, &store.Volume{ID: "vol-" + tenant, Name: "same", Tenant: tenant, State: store.VolumeAvailable}))
		must(t, s.CreateSnapshot(ctx, &store.Snapshot{ID: "snap-" + tenant, Name: "same", Tenant: tenant, SandboxID: id}))
		must(t, s.CreateAPIKey(ctx, &store.APIKey{ID: "key-" + tenant, Tenant: tenant, Hash: []byte("h" + tenant)}))
	}
	def, acme, other := store.Owner{}, store.OwnedBy("acme"), store.OwnedBy("other")

	notFound := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s: err %v, want not found", what, err)
		}
	}
	// Gets by id and by name: own object found, another's not.
	for _, tc := range []struct {
		o      store.Owner
		tenant string
	}{{def, ""}, {acme, "acme"}} {
		o, mine, theirs := tc.o, tc.tenant, "acme"
		if mine == "acme" {
			theirs = ""
		}
		if sb, err := s.GetSandbox(ctx, o, "sb-"+mine); err != nil || sb.Tenant != mine {
			t.Errorf("%v: own sandbox: %v", o, err)
		}
		_, err := s.GetSandbox(ctx, o, "sb-"+theirs)
		notFound(o.String()+" GetSandbox of another", err)
		if sb, err := s.GetSandboxByName(ctx, o, "same"); err != nil || sb.ID != "sb-"+mine {
			t.Errorf("%v: own sandbox by name: %v %v", o, sb, err)
		}
		if v, err := s.GetVolume(ctx, o, "vol-"+mine); err != nil || v.Tenant != mine {
			t.Errorf("%v: own volume: %v", o, err)
		}
		_, err = s.GetVolume(ctx, o, "vol-"+theirs)
		notFound(o.String()+" GetVolume of another", err)
		if v, err := s.GetVolumeByName(ctx, o, "same"); err != nil || v.ID != "vol-"+mine {
			t.Errorf("%v: own volume by name: %v %v", o, v, err)
		}
		if sn, err := s.GetSnapshot(ctx, o, "snap-"+mine); err != nil || sn.Tenant != mine {
			t.Errorf("%v: own snapshot: %v", o, err)
		}
		_, err = s.GetSnapshot(ctx, o, "snap-"+theirs)
		notFound(o.String()+" GetSnapshot of another", err)
		if sn, err := s.GetSnapshotByName(ctx, o, "same"); err != nil || sn.ID != "snap-"+mine {
			t.Errorf("%v: own snapshot by name: %v %v", o, sn, err)
		}
		if evs, _, err := s.ListEvents(ctx, o, "sb-"+mine, 0, store.Page{}); err != nil || len(evs) != 1 {
			t.Errorf("%v: own events: %d %v", o, len(evs), err)
		}
		if evs, _, err := s.ListEvents(ctx, o, "sb-"+theirs, 0, store.Page{}); err != nil || len(evs) != 0 {
			t.Errorf("%v: another's events: %d %v", o, len(evs), err)
		}
		if fs, err := s.ListFlows(ctx, o, "sb-"+mine, 0, 0); err != nil || len(fs) != 1 {
			t.Errorf("%v: own flows: %d %v", o, len(fs), err)
		}
		if fs, err := s.ListFlows(ctx, o, "sb-"+theirs, 0, 0); err != nil || len(fs) != 0 {
			t.Errorf("%v: another's flows: %d %v", o, len(fs), err)
		}
		// Lists hold only the owner's objects.
		sbs, _, err := s.ListSandboxes(ctx, store.SandboxFilter{Owner: o}, store.Page{})
		if err != nil || len(sbs) != 1 || sbs[0].Tenant != mine {
			t.Errorf("%v: ListSandboxes = %v %v", o, ids(sbs), err)
		}
		vs, _, err := s.ListVolumes(ctx, store.VolumeFilter{Owner: o}, store.Page{})
		if err != nil || len(vs) != 1 || vs[0].Tenant != mine {
			t.Errorf("%v: ListVolumes = %d %v", o, len(vs), err)
		}
		sns, _, err := s.ListSnapshots(ctx, store.SnapshotFilter{Owner: o}, store.Page{})
		if err != nil || len(sns) != 1 || sns[0].Tenant != mine {
			t.Errorf("%v: ListSnapshots = %d %v", o, len(sns), err)
		}
		if sns, _, err := s.ListSnapshots(ctx, store.SnapshotFilter{Owner: o, SandboxID: "sb-" + theirs}, store.Page{}); err != nil || len(sns) != 0 {
			t.Errorf("%v: ListSnapshots of another's sandbox = %d %v", o, len(sns), err)
		}
		ks, _, err := s.ListAPIKeys(ctx, o, store.Page{})
		if err != nil || len(ks) != 1 || ks[0].Tenant != mine {
			t.Errorf("%v: ListAPIKeys = %d %v", o, len(ks), err)
		}
	}

	// A tenant with nothing sees nothing.
	_, err := s.GetSandboxByName(ctx, other, "same")
	notFound("GetSandboxByName of a stranger", err)
	_, err = s.GetVolumeByName(ctx, other, "same")
	notFound("GetVolumeByName of a stranger", err)
	_, err = s.GetSnapshotByName(ctx, other, "same")
	notFound("GetSnapshotByName of a stranger", err)
	if sbs, _, _ := s.ListSandboxes(ctx, store.SandboxFilter{Owner: other, IncludeDeleted: true}, store.Page{}); len(sbs) != 0 {
		t.Errorf("stranger lists %d sandboxes", len(sbs))
	}

	// AnyOwner sees both; a name live in two tenants is ambiguous to it.
	for _, id := range []string{"sb-", "sb-acme"} {
		if _, err := s.GetSandbox(ctx, store.AnyOwner, id); err != nil {
			t.Errorf("AnyOwner GetSandbox(%s): %v", id, err)
		}
	}
	if sbs, _, _ := s.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner}, store.Page{}); len(sbs) != 2 {
		t.Errorf("AnyOwner lists %d sandboxes, want 2", len(sbs))
	}
	_, err = s.GetSandboxByName(ctx, store.AnyOwner, "same")
	wantCategory(t, err, errdefs.ErrConflict)
	_, err = s.GetVolumeByName(ctx, store.AnyOwner, "same")
	wantCategory(t, err, errdefs.ErrConflict)
	_, err = s.GetSnapshotByName(ctx, store.AnyOwner, "same")
	wantCategory(t, err, errdefs.ErrConflict)
}
