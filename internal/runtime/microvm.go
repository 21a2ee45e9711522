package runtime

import (
	"errors"
	"fmt"
	"os"
)

// The microVM class runs each sandbox in its own lightweight virtual
// machine (its own guest kernel) through an OCI runtime with a
// runc-compatible command line, such as Kata Containers' kata-runtime. It
// reuses the runc driver: the same bundle, the same create/start/kill/
// delete/state verbs, the same cgroup for limits, pause and kill-all (the
// VMM and its helpers live in the sandbox's cgroup).
//
// Honest status: berth's CI machines have no usable KVM, so this class is
// not exercised by the test suite and is not part of any claim; the
// daemon offers it only when asked (--microvm PATH) on a host with
// /dev/kvm. See docs/microvm.md for how to enable and check it.

// KVMDevice is where a KVM-capable host exposes virtualisation.
var KVMDevice = "/dev/kvm"

// MicroVM is the microVM class: the runc driver, another binary.
type MicroVM struct{ *Runc }

// NoInheritedListeners tells the manager that host descriptors do not
// reach the guest: the agent binds its socket itself (Kata shares the
// bind-mounted /.berth/run directory into the VM).
func (MicroVM) NoInheritedListeners() {}

// NewMicroVM returns the microVM runtime class named name, driving the
// OCI runtime binary with state under root.
func NewMicroVM(name, binary, root string) (*MicroVM, error) {
	if name == "" || name == "runc" || name == "runsc" {
		return nil, fmt.Errorf("microvm: bad class name %q", name)
	}
	f, err := os.OpenFile(KVMDevice, os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("microvm: %s does not exist: this host cannot run virtual machines", KVMDevice)
		}
		return nil, fmt.Errorf("microvm: %w", err)
	}
	f.Close()
	rc, err := NewRunc(binary, root)
	if err != nil {
		return nil, fmt.Errorf("microvm: %w", err)
	}
	rc.name = name
	rc.iso = &Isolation{
		Runtime:       name,
		SharedKernel:  false, // a guest kernel per sandbox
		UserNamespace: true,  // inside the guest, as the spec asks
		Seccomp:       "docker-default (in the guest)",
		Capabilities:  capNames(),
		NoNewPrivs:    true,
		ReadonlyImage: true,
	}
	return &MicroVM{rc}, nil
}
