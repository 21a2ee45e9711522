package nodetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
)

// testClasses: the classes are named once each, the default first, and
// ClassCaps answers for each of them, for "" (the default) and not for an
// unknown name.
func (s *suite) testClasses(t *testing.T, want []string) {
	cls := s.b.Classes()
	if len(cls) == 0 {
		t.Fatal("Classes is empty")
	}
	seen := map[string]bool{}
	for _, c := range cls {
		if c.Name == "" || seen[c.Name] {
			t.Errorf("class name %q empty or repeated in %+v", c.Name, cls)
		}
		seen[c.Name] = true
		caps, ok := node.ClassCaps(s.b, c.Name)
		if !ok || caps != c.Caps {
			t.Errorf("ClassCaps(%q) = %+v, %v; want %+v", c.Name, caps, ok, c.Caps)
		}
		t.Logf("class %s: %+v", c.Name, c.Caps)
	}
	if caps, ok := node.ClassCaps(s.b, ""); !ok || caps != cls[0].Caps {
		t.Errorf("ClassCaps(\"\") = %+v, %v; want the default's %+v", caps, ok, cls[0].Caps)
	}
	if _, ok := node.ClassCaps(s.b, "no-such-class"); ok {
		t.Error("ClassCaps of an unknown class reports it offered")
	}
	for _, w := range want {
		if !seen[w] {
			t.Errorf("the harness asks for class %q, which the backend does not offer (%+v)", w, cls)
		}
	}
}

// testVolumes: normalize, create (twice), usage, list, delete (twice).
func (s *suite) testVolumes(t *testing.T) {
	size, inodes, err := s.b.NormalizeVolume(0, 0)
	if err != nil || size <= 0 || inodes <= 0 {
		t.Fatalf("NormalizeVolume(0, 0) = %d, %d, %v; want the defaults", size, inodes, err)
	}
	if _, _, err := s.b.NormalizeVolume(1, 0); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("NormalizeVolume(1 byte) = %v, want an invalid-argument error", err)
	}
	size, inodes, err = s.b.NormalizeVolume(volumeSize, 0)
	if err != nil || size != volumeSize {
		t.Fatalf("NormalizeVolume(%d) = %d, %d, %v", volumeSize, size, inodes, err)
	}
	id := newID()
	s.mu.Lock()
	s.volumes[id] = ""
	s.mu.Unlock()
	for i := range 2 { // idempotent
		if err := s.b.CreateVolume(id, size, inodes); err != nil {
			t.Fatalf("CreateVolume #%d: %v", i+1, err)
		}
	}
	ids, err := s.b.VolumeIDs()
	if err != nil || !slices.Contains(ids, id) {
		t.Fatalf("VolumeIDs = %v, %v; want it to hold %s", ids, err, id)
	}
	u, err := s.b.VolumeUsage(id)
	if err != nil || u.ReadOnly || u.UsedBytes < 0 || u.UsedBytes > size {
		t.Errorf("VolumeUsage of a new volume = %+v, %v", u, err)
	}
	for i := range 2 { // idempotent
		if err := s.b.DeleteVolume(id); err != nil {
			t.Fatalf("DeleteVolume #%d: %v", i+1, err)
		}
	}
	s.mu.Lock()
	delete(s.volumes, id)
	s.mu.Unlock()
	if ids, err := s.b.VolumeIDs(); err != nil || slices.Contains(ids, id) {
		t.Errorf("VolumeIDs after delete = %v, %v", ids, err)
	}
}

// testCapabilities: every capability a class claims is an interface the
// backend implements (node.CheckCaps), and asking for one it lacks is a
// refusal (not supported), as the engine gets it. Egress rules' grammar
// is package egressrule's, off the seam; Allocate and SetRules of egress
// sandboxes need the node's bridge and are the e2e suite's (test/e2e
// network tests run the daemon in a namespace of their own: no packet of
// a test may leave the machine).
func (s *suite) testCapabilities(t *testing.T) {
	if err := node.CheckCaps(s.b); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		name string
		op   string
		need func(string) error
	}{
		{"Freezer", node.OpPause, func(op string) error { _, err := node.Need[node.Freezer](s.b, op); return err }},
		{"Hibernator", node.OpHibernate, func(op string) error { _, err := node.Need[node.Hibernator](s.b, op); return err }},
		{"Capturer", node.OpCapture, func(op string) error { _, err := node.Need[node.Capturer](s.b, op); return err }},
		{"Egress", node.OpEgress, func(op string) error { _, err := node.Need[node.Egress](s.b, op); return err }},
		{"EgressProxy", node.OpEgressSecrets, func(op string) error { _, err := node.Need[node.EgressProxy](s.b, op); return err }},
		{"RootLayer", node.OpDiff, func(op string) error { _, err := node.Need[node.RootLayer](s.b, op); return err }},
		{"Renamer", node.OpRename, func(op string) error { _, err := node.Need[node.Renamer](s.b, op); return err }},
	} {
		err := c.need(c.op)
		if err == nil {
			t.Logf("the backend is a node.%s", c.name)
			continue
		}
		if !errors.Is(err, errdefs.ErrNotSupported) || errdefs.Message(err) == "" {
			t.Errorf("asking for node.%s, which the backend lacks: %v; want not supported, with a reason", c.name, err)
		}
		t.Logf("the backend is no node.%s: %v", c.name, err)
	}
}

// testCapacity: the capacity is positive, a small need is admitted and a
// huge one refused as insufficient storage.
func (s *suite) testCapacity(t *testing.T) {
	c, err := s.b.Capacity()
	if err != nil || c <= 0 {
		t.Fatalf("Capacity = %d, %v", c, err)
	}
	if err := s.b.Admit(1<<20, "a small sandbox", func() int64 { return 0 }); err != nil {
		t.Errorf("Admit(1 MiB) = %v", err)
	}
	err = s.b.Admit(1<<60, "an exbibyte", func() int64 { return 42 })
	if !errors.Is(err, errdefs.ErrInsufficientStorage) {
		t.Errorf("Admit(1 EiB) = %v, want insufficient storage", err)
	}
	s.b.ReleaseReserve() // a disk that is not full keeps its reserve: nothing to see, it must not fail
}

// testIDRange: slots have disjoint ranges of one size (or there is one
// shared range and no slot).
func (s *suite) testIDRange(t *testing.T) {
	a, ok := s.b.IDRange(s.h.FirstSlot + 1000)
	if !ok {
		shared, _ := s.b.IDRange(-1)
		if a != shared || a.Size == 0 {
			t.Errorf("IDRange without slots = %+v, then %+v", a, shared)
		}
		return
	}
	b, _ := s.b.IDRange(s.h.FirstSlot + 1001)
	if a.Size == 0 || a.Size != b.Size || a.Mode != b.Mode || a.Slot == b.Slot {
		t.Fatalf("IDRange: %+v and %+v", a, b)
	}
	if a.Base < b.Base+b.Size && b.Base < a.Base+a.Size {
		t.Errorf("IDRange: slots overlap: %+v and %+v", a, b)
	}
}

// testNothingLeft: after every case removed its sandboxes, a sweep with no
// live record finds nothing, and no volume of the suite's is left.
func (s *suite) testNothingLeft(t *testing.T) {
	s.mu.Lock()
	n := len(s.live)
	s.mu.Unlock()
	if n > 0 {
		s.removeAll(t)
	}
	for _, f := range s.sweep(t.Context(), s.sweepInput()) {
		t.Errorf("sweep after every sandbox was removed: %s", f)
	}
	if ids, err := s.b.VolumeIDs(); err != nil || len(ids) > 0 {
		t.Errorf("VolumeIDs at the end = %v, %v", ids, err)
	}
	if n := s.b.AgentRefusals(); n != 0 {
		t.Errorf("AgentRefusals = %d: the backend refused its own agents", n)
	}
}
