package client

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/berth-sh/berth/api"
)

// Fork creates children of the sandbox id: each starts as a copy-on-write
// view of the parent's filesystem (workspace and writable root) at the
// instant of the fork; the parent keeps running. Children are ephemeral
// unless req.Persistent is set.
func (c *Client) Fork(ctx context.Context, id string, req api.ForkRequest) (*api.ForkResponse, error) {
	var fr api.ForkResponse
	if err := c.doIdempotent(ctx, http.MethodPost, sandboxPath(id, "fork"), req, &fr); err != nil {
		return nil, err
	}
	if fr.Children == nil {
		fr.Children = []api.Sandbox{}
	}
	return &fr, nil
}

func snapshotPath(id string, rest ...string) string {
	p := "/v1/snapshots/" + pathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// CreateSnapshot takes a crash-consistent snapshot of the filesystem state
// (workspace volume and writable root) of the sandbox id.
func (c *Client) CreateSnapshot(ctx context.Context, id string, req api.CreateSnapshotRequest) (*api.Snapshot, error) {
	var s api.Snapshot
	if err := c.doIdempotent(ctx, http.MethodPost, sandboxPath(id, "snapshots"), req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ListSnapshots lists the snapshots taken of the sandbox sandboxID, or every
// snapshot of the caller when sandboxID is empty.
func (c *Client) ListSnapshots(ctx context.Context, sandboxID string) ([]api.Snapshot, error) {
	return listAll[api.Snapshot](ctx, c, snapshotsPath(sandboxID), nil)
}

// GetSnapshot returns a snapshot by id or name.
func (c *Client) GetSnapshot(ctx context.Context, id string) (*api.Snapshot, error) {
	var s api.Snapshot
	if err := c.do(ctx, http.MethodGet, snapshotPath(id), nil, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// DeleteSnapshot deletes a snapshot by id or name.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, snapshotPath(id), nil, nil, nil)
}

// RestoreSnapshot puts the sandbox a snapshot was taken from back to the
// snapshot's content, in place, and returns that sandbox.
func (c *Client) RestoreSnapshot(ctx context.Context, id string) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.do(ctx, http.MethodPost, snapshotPath(id, "restore"), nil, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Export streams a tar archive of exactly the named paths of the sandbox id
// to w.
func (c *Client) Export(ctx context.Context, id string, paths []string, w io.Writer) error {
	if len(paths) == 0 {
		return fmt.Errorf("export %s: no paths given", id)
	}
	req, err := c.newRequest(ctx, http.MethodPost, sandboxPath(id, "export"), nil, api.ExportRequest{Paths: paths})
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/x-tar")
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer closeBody(resp.Body)
	if _, err := io.Copy(w, resp.Body); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("export %s: %w", id, err)
	}
	return nil
}

// Copy copies a file or directory from one sandbox to another directly,
// without passing through the client: req.FromPath of req.From is extracted
// into the directory req.ToPath of req.To.
func (c *Client) Copy(ctx context.Context, req api.CopyRequest) error {
	return c.do(ctx, http.MethodPost, "/v1/copy", nil, req, nil)
}
