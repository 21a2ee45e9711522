// Package cleanup is an undo stack for operations of several steps: each
// step that changes something pushes what undoes it; on failure the stack
// runs, last step first, and on success it is released. So an operation
// undoes exactly what it did, whichever step failed. (The shape is gVisor's
// pkg/cleanup; this one also collects the undo steps' own errors, which
// the engine records rather than drops.)
//
//	cu := cleanup.Make()
//	defer cu.Clean()
//	if err := freeze(); err != nil { return err }
//	cu.Add(thaw)
//	if err := record(); err != nil { return err } // thaws
//	cu.Release()
package cleanup

import "errors"

// Cleanup is a stack of undo steps. The zero value is ready to use.
type Cleanup struct {
	steps []func() error
	errs  []error
}

// Make returns an empty stack.
func Make() *Cleanup { return &Cleanup{} }

// Add pushes an undo step.
func (c *Cleanup) Add(f func() error) { c.steps = append(c.steps, f) }

// AddFunc pushes an undo step that cannot fail.
func (c *Cleanup) AddFunc(f func()) { c.Add(func() error { f(); return nil }) }

// Clean runs the undo steps not released, last first, once. Their
// errors are kept for Err.
func (c *Cleanup) Clean() {
	for i := len(c.steps) - 1; i >= 0; i-- {
		if err := c.steps[i](); err != nil {
			c.errs = append(c.errs, err)
		}
	}
	c.steps = nil
}

// Release disarms the stack: Clean does nothing afterwards. It returns
// the undo steps as one func, for a caller that takes them over.
func (c *Cleanup) Release() func() error {
	steps := c.steps
	c.steps = nil
	return func() error {
		var errs []error
		for i := len(steps) - 1; i >= 0; i-- {
			if err := steps[i](); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
}

// Err returns the errors of the undo steps Clean ran.
func (c *Cleanup) Err() error { return errors.Join(c.errs...) }
