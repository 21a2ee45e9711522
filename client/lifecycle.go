package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/berth-sh/berth/api"
)

// The lifecycle verbs below answer with the sandbox after the transition. A
// verb that does not apply to the sandbox's current state fails with a
// conflict error (IsConflict) whose message names that state.

// Pause freezes every process of a running sandbox: memory and processes are
// kept, no CPU is used.
func (c *Client) Pause(ctx context.Context, id string) (*api.Sandbox, error) {
	return c.lifecycle(ctx, id, "pause")
}

// Resume thaws a paused sandbox.
func (c *Client) Resume(ctx context.Context, id string) (*api.Sandbox, error) {
	return c.lifecycle(ctx, id, "resume")
}

// Stop scales a sandbox to zero: its processes and memory are gone; its
// volume, config, policies and network identity are kept. A running
// sandbox's processes first get its template's stop signal (SIGTERM by
// default) and the daemon's default grace to end.
func (c *Client) Stop(ctx context.Context, id string) (*api.Sandbox, error) {
	return c.lifecycle(ctx, id, "stop")
}

// StopTimeout is Stop with the grace its processes get between the stop
// signal (the template's, else SIGTERM) and the kill; 0 kills at once.
// Stop uses the daemon's default (10 s).
func (c *Client) StopTimeout(ctx context.Context, id string, grace time.Duration) (*api.Sandbox, error) {
	var sb api.Sandbox
	q := url.Values{"timeout": {grace.String()}}
	if err := c.do(ctx, http.MethodPost, sandboxPath(id, "stop"), q, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Start brings a stopped sandbox back from its template plus its volume.
func (c *Client) Start(ctx context.Context, id string) (*api.Sandbox, error) {
	return c.lifecycle(ctx, id, "start")
}

// Reset returns a sandbox's workspace and writable layer to its template;
// its config is kept.
func (c *Client) Reset(ctx context.Context, id string) (*api.Sandbox, error) {
	return c.lifecycle(ctx, id, "reset")
}

// Quarantine freezes a sandbox, cuts its network, refuses exec and writes
// and keeps all of its state for inspection until Release or deletion.
func (c *Client) Quarantine(ctx context.Context, id string) (*api.Sandbox, error) {
	return c.lifecycle(ctx, id, "quarantine")
}

// Release ends a sandbox's quarantine.
func (c *Client) Release(ctx context.Context, id string) (*api.Sandbox, error) {
	return c.lifecycle(ctx, id, "release")
}

// Touch records activity on a sandbox (a keep-alive): its idle timer starts
// again.
func (c *Client) Touch(ctx context.Context, id string) (*api.Sandbox, error) {
	return c.lifecycle(ctx, id, "touch")
}

func (c *Client) lifecycle(ctx context.Context, id, verb string) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.do(ctx, http.MethodPost, sandboxPath(id, verb), nil, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Diff lists the paths of a sandbox's filesystem that were added, changed or
// removed against its template, with their sizes.
func (c *Client) Diff(ctx context.Context, id string) ([]api.DiffEntry, error) {
	d := []api.DiffEntry{}
	if err := c.do(ctx, http.MethodGet, sandboxPath(id, "diff"), nil, nil, &d); err != nil {
		return nil, err
	}
	if d == nil {
		d = []api.DiffEntry{}
	}
	return d, nil
}

// EventsAfter returns the events of a sandbox whose id is greater than after,
// oldest first: pass the id of the last event seen to follow a sandbox.
func (c *Client) EventsAfter(ctx context.Context, id string, after int64) ([]api.Event, error) {
	return listAll[api.Event](ctx, c, sandboxPath(id, "events"), url.Values{"after": {strconv.FormatInt(after, 10)}})
}
