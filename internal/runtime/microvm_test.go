package runtime

import (
	"path/filepath"

	"strings"
	"testing"
)

func TestMicroVMRefusesHostsWithoutKVM(t *testing.T) {
	old := KVMDevice
	KVMDevice = filepath.Join(t.TempDir(), "no-kvm")
	defer func() { KVMDevice = old }()
	_, err := NewMicroVM("kata", "runc", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "cannot run virtual machines") {
		t.Fatalf("want a refusal naming the missing KVM, got %v", err)
	}
	if _, err := NewMicroVM("runc", "runc", t.TempDir()); err == nil {
		t.Fatal("a microVM class may not take a built-in class's name")
	}
}

func TestMicroVMIsolationIsNotSharedKernel(t *testing.T) {
	rc := MicroVM{&Runc{name: "kata", iso: &Isolation{Runtime: "kata"}}}
	if rc.Name() != "kata" || rc.Isolation().SharedKernel {
		t.Fatal(rc.Name())
	}
	var _ interface{ NoInheritedListeners() } = rc
	if (&Runc{}).Isolation().SharedKernel != true {
		t.Fatal("runc shares the host kernel")
	}
}
