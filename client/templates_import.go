package client

import (
	"context"
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
	return readStream(ctx, c, hreq, "import", func(ev *api.ImportEvent) (*api.Template, error) {
		switch {
		case ev.Error != nil:
			return nil, apiError(ev.Error)
		case ev.Template != nil:
			return ev.Template, nil
		case ev.Progress != nil && progress != nil:
			progress(*ev.Progress)
		}
		return nil, nil
	})
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
	return readStream(ctx, c, hreq, "push", func(ev *api.PushEvent) (*api.PushResult, error) {
		switch {
		case ev.Error != nil:
			return nil, apiError(ev.Error)
		case ev.Result != nil:
			return ev.Result, nil
		case ev.Progress != nil && progress != nil:
			progress(*ev.Progress)
		}
		return nil, nil
	})
}
