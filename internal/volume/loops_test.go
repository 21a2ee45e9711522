package volume

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLoopIndex: an image's device is found by the index of this
// process's bindings, by a fresh index's one scan (a binding a crashed
// daemon left), not after the device let go, and never for a new file at
// a bound file's path.
func TestLoopIndex(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for loop devices")
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 8<<20); err != nil {
		t.Fatal(err)
	}
	if _, ok := findLoop(img); ok {
		t.Fatal("an image never bound has a device")
	}
	loop, err := attachLoop(img)
	if err != nil {
		t.Fatal(err)
	}
	// Not autocleared until its last opener goes: closed below.
	dev, ok := findLoop(img)
	if !ok || dev != loop.Name() {
		t.Fatalf("bound to %s, found %q %v", loop.Name(), dev, ok)
	}
	again, err := attachLoop(img)
	if err != nil || again.Name() != loop.Name() {
		t.Fatalf("a second attach bound %v (%v), not the image's %s", again, err, loop.Name())
	}
	again.Close()

	saved := loops
	loops = &loopIndex{} // as a daemon started after a crash sees it
	dev, ok = findLoop(img)
	loops = saved
	if !ok || dev != loop.Name() {
		t.Fatalf("a fresh index's scan found %q %v, want %s", dev, ok, loop.Name())
	}

	// The same path, a new file: not the bound one.
	if err := os.Rename(img, img+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if dev, ok := findLoop(img); ok {
		t.Fatalf("a new file at a bound file's path has %s", dev)
	}
	if dev, ok := findLoop(img + ".old"); !ok || dev != loop.Name() {
		t.Fatalf("the renamed bound file lost its device: %q %v", dev, ok)
	}

	loop.Close() // autoclear: the kernel lets go from a work queue
	if err := waitDetached(img+".old", detachWait); err != nil {
		t.Fatal(err)
	}
	if _, ok := findLoop(img + ".old"); ok {
		t.Fatal("found after the device let go")
	}
}
