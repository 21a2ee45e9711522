package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/berth-sh/berth/api"
)

// ImportTemplateProgress is ImportTemplate reporting each layer's
// progress to progress (bytes read of its blob, done, cached) as the
// daemon unpacks it.
func (c *Client) ImportTemplateProgress(ctx context.Context, req api.ImportTemplateRequest, progress func(api.ImportProgress)) (*api.Template, error) {
	hreq, err := c.newRequest(ctx, http.MethodPost, "/v1/templates/import", nil, req)
	if err != nil {
		return nil, err
	}
	return c.importStream(ctx, hreq, progress)
}

// UploadTemplateArchiveProgress is UploadTemplateArchive reporting the
// layers' progress once the daemon has the archive.
func (c *Client) UploadTemplateArchiveProgress(ctx context.Context, name string, r io.Reader, progress func(api.ImportProgress)) (*api.Template, error) {
	hreq, err := c.newRequest(ctx, http.MethodPut, "/v1/templates/"+pathEscape(name)+"/archive", nil, r)
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/x-tar")
	setContentLength(hreq, r)
	return c.importStream(ctx, hreq, progress)
}

func (c *Client) importStream(ctx context.Context, hreq *http.Request, progress func(api.ImportProgress)) (*api.Template, error) {
	hreq.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(hreq)
	if err != nil {
		return nil, err
	}
	defer closeBody(resp.Body)
	dec := json.NewDecoder(resp.Body)
	for {
		var ev api.ImportEvent
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				return nil, errors.New("import stream ended without a result")
			}
			return nil, fmt.Errorf("read import stream: %w", err)
		}
		switch {
		case ev.Error != nil:
			return nil, apiError(ev.Error)
		case ev.Template != nil:
			return ev.Template, nil
		case ev.Progress != nil && progress != nil:
			progress(*ev.Progress)
		}
	}
}

// PushTemplate writes template name to a registry as an OCI image, with
// the daemon's registry credentials, and returns what it wrote.
func (c *Client) PushTemplate(ctx context.Context, name string, req api.PushTemplateRequest) (*api.PushResult, error) {
	var out api.PushResult
	if err := c.do(ctx, http.MethodPost, "/v1/templates/"+pathEscape(name)+"/push", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PushTemplateProgress is PushTemplate reporting each layer's upload to
// progress (bytes of its compressed blob sent, done, cached: the registry
// had it).
func (c *Client) PushTemplateProgress(ctx context.Context, name string, req api.PushTemplateRequest, progress func(api.ImportProgress)) (*api.PushResult, error) {
	hreq, err := c.newRequest(ctx, http.MethodPost, "/v1/templates/"+pathEscape(name)+"/push", nil, req)
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(hreq)
	if err != nil {
		return nil, err
	}
	defer closeBody(resp.Body)
	dec := json.NewDecoder(resp.Body)
	for {
		var ev api.PushEvent
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				return nil, errors.New("push stream ended without a result")
			}
			return nil, fmt.Errorf("read push stream: %w", err)
		}
		switch {
		case ev.Error != nil:
			return nil, apiError(ev.Error)
		case ev.Result != nil:
			return ev.Result, nil
		case ev.Progress != nil && progress != nil:
			progress(*ev.Progress)
		}
	}
}
