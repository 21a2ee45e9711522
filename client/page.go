package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/berth-sh/berth/api"
)

// Page asks a list route for one page: at most Limit items (0: the
// server's default, 1000) from Cursor ("" for the first page; else the
// Next of the page before). The List methods without Page in their name
// page through everything themselves.
type Page struct {
	Limit  int
	Cursor string
}

// getPage GETs one page of a list into out and returns the next page's
// cursor ("" after the last, and from a daemon that does not page).
func (c *Client) getPage(ctx context.Context, path string, q url.Values, p Page, out any) (string, error) {
	v := url.Values{}
	for k, vs := range q {
		v[k] = vs
	}
	if p.Limit > 0 {
		v.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Cursor != "" {
		v.Set("cursor", p.Cursor)
	}
	req, err := c.newRequest(ctx, http.MethodGet, path, v, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.send(req)
	if err != nil {
		return "", err
	}
	defer closeBody(resp.Body)
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return "", fmt.Errorf("GET %s: decode response: %w", path, err)
	}
	return resp.Header.Get(api.NextCursorHeader), nil
}

// listPage is getPage into a fresh, never nil, slice.
func listPage[T any](ctx context.Context, c *Client, path string, q url.Values, p Page) ([]T, string, error) {
	out := []T{}
	next, err := c.getPage(ctx, path, q, p, &out)
	if err != nil {
		return nil, "", err
	}
	if out == nil { // the server answered null
		out = []T{}
	}
	return out, next, nil
}

// listAll follows a list's cursors to its end.
func listAll[T any](ctx context.Context, c *Client, path string, q url.Values) ([]T, error) {
	all := []T{}
	p := Page{}
	for {
		items, next, err := listPage[T](ctx, c, path, q, p)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if next == "" {
			return all, nil
		}
		if next == p.Cursor {
			return nil, fmt.Errorf("GET %s: the server repeated cursor %q", path, next)
		}
		p.Cursor = next
	}
}

// ListSandboxesPage returns one page of the caller's sandboxes (with all,
// tombstones too) and the next page's cursor ("" after the last).
func (c *Client) ListSandboxesPage(ctx context.Context, all bool, p Page) ([]api.Sandbox, string, error) {
	return listPage[api.Sandbox](ctx, c, "/v1/sandboxes", sandboxesQuery(all), p)
}

// ListVolumesPage returns one page of the volumes and the next cursor.
func (c *Client) ListVolumesPage(ctx context.Context, p Page) ([]api.Volume, string, error) {
	return listPage[api.Volume](ctx, c, "/v1/volumes", nil, p)
}

// ListSnapshotsPage returns one page of the snapshots of sandboxID (""
// for all) and the next cursor.
func (c *Client) ListSnapshotsPage(ctx context.Context, sandboxID string, p Page) ([]api.Snapshot, string, error) {
	return listPage[api.Snapshot](ctx, c, snapshotsPath(sandboxID), nil, p)
}

// ListTemplatesPage returns one page of the templates and the next cursor.
func (c *Client) ListTemplatesPage(ctx context.Context, p Page) ([]api.Template, string, error) {
	return listPage[api.Template](ctx, c, "/v1/templates", nil, p)
}

// EventsPage returns one page of a sandbox's events with ids above after,
// oldest first, and the next cursor.
func (c *Client) EventsPage(ctx context.Context, id string, after int64, p Page) ([]api.Event, string, error) {
	return listPage[api.Event](ctx, c, sandboxPath(id, "events"), eventsQuery(after), p)
}

func sandboxesQuery(all bool) url.Values {
	if all {
		return url.Values{"all": {"true"}}
	}
	return nil
}

func snapshotsPath(sandboxID string) string {
	if sandboxID != "" {
		return sandboxPath(sandboxID, "snapshots")
	}
	return "/v1/snapshots"
}

func eventsQuery(after int64) url.Values {
	if after > 0 {
		return url.Values{"after": {strconv.FormatInt(after, 10)}}
	}
	return nil
}
