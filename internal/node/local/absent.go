package local

import (
	"context"
	"syscall"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/runtime"
)

// absentRuntime stands for a runtime class the backend does not have now
// (runsc whose probe failed at start, or that was removed from the host):
// every call is refused as unavailable (503), so its sandboxes are neither
// judged gone nor run by another class.
type absentRuntime string

var _ runtime.Runtime = absentRuntime("")

func (a absentRuntime) err() error {
	return errdefs.Unavailable("runtime class %s is not available on this daemon now", string(a))
}

func (a absentRuntime) Name() string { return string(a) }

func (a absentRuntime) Start(context.Context, *runtime.Spec) (int, error) { return 0, a.err() }

func (a absentRuntime) State(context.Context, string) (runtime.State, error) {
	return runtime.State{}, a.err()
}

func (a absentRuntime) List(context.Context) ([]runtime.State, error) { return nil, a.err() }

func (a absentRuntime) Kill(context.Context, string, syscall.Signal) error { return a.err() }

func (a absentRuntime) Delete(context.Context, string) error { return a.err() }

func (a absentRuntime) Pause(context.Context, string) error { return a.err() }

func (a absentRuntime) Resume(context.Context, string) error { return a.err() }

func (a absentRuntime) Isolation() runtime.Isolation { return runtime.Isolation{} }
