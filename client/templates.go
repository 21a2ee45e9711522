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

// ListTemplates lists the templates sandboxes can be created from.
func (c *Client) ListTemplates(ctx context.Context) ([]api.Template, error) {
	return listAll[api.Template](ctx, c, "/v1/templates", nil)
}

// GetTemplate returns one template by name.
func (c *Client) GetTemplate(ctx context.Context, name string) (*api.Template, error) {
	var t api.Template
	if err := c.do(ctx, http.MethodGet, "/v1/templates/"+pathEscape(name), nil, nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// DeleteTemplate removes a template. Sandboxes made from it keep running.
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/templates/"+pathEscape(name), nil, nil, nil)
}

// ImportTemplate imports a template from an OCI layout directory or a
// docker-save tarball on the daemon's host (req.Path) or from a registry
// (req.Ref).
func (c *Client) ImportTemplate(ctx context.Context, req api.ImportTemplateRequest) (*api.Template, error) {
	var t api.Template
	if err := c.do(ctx, http.MethodPost, "/v1/templates/import", nil, req, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// UploadTemplateArchive imports a template from a docker-save or OCI tarball
// read from r, which is streamed to the daemon.
func (c *Client) UploadTemplateArchive(ctx context.Context, name string, r io.Reader) (*api.Template, error) {
	req, err := c.newRequest(ctx, http.MethodPut, "/v1/templates/"+pathEscape(name)+"/archive", nil, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	setContentLength(req, r)
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	defer closeBody(resp.Body)
	var t api.Template
	if err := json.NewDecoder(resp.Body).Decode(&t); err != nil {
		return nil, fmt.Errorf("decode template: %w", err)
	}
	return &t, nil
}

// BuildTemplate builds a template by running req.Run steps on top of
// req.From. The steps' output is written to progress (if non-nil) as it is
// produced; the built template is returned when the build succeeds.
func (c *Client) BuildTemplate(ctx context.Context, req api.BuildTemplateRequest, progress io.Writer) (*api.Template, error) {
	return c.buildStream(ctx, "/v1/templates/build", req, progress)
}

// buildStream posts body to path and reads the NDJSON stream of
// api.BuildEvent it answers: output is copied to progress, and the stream
// ends with the template or an error.
func (c *Client) buildStream(ctx context.Context, path string, body any, progress io.Writer) (*api.Template, error) {
	hreq, err := c.newRequest(ctx, http.MethodPost, path, nil, body)
	if err != nil {
		return nil, err
	}
	return c.readBuildStream(ctx, hreq, progress)
}

// readBuildStream sends hreq and reads the NDJSON stream of
// api.BuildEvent it answers.
func (c *Client) readBuildStream(ctx context.Context, hreq *http.Request, progress io.Writer) (*api.Template, error) {
	return readStream(ctx, c, hreq, "build", func(ev *api.BuildEvent) (*api.Template, error) {
		switch {
		case ev.Error != nil:
			if ev.Step > 0 {
				return nil, fmt.Errorf("step %d: %w", ev.Step, apiError(ev.Error))
			}
			return nil, apiError(ev.Error)
		case ev.Template != nil:
			return ev.Template, nil
		case len(ev.Data) > 0 && progress != nil:
			if _, err := progress.Write(ev.Data); err != nil {
				return nil, fmt.Errorf("write build output: %w", err)
			}
		}
		return nil, nil
	})
}

// readStream sends hreq and reads the NDJSON stream of events E it
// answers (a build, import or push, named what), handing each to each
// until it returns a result or an error.
func readStream[E, R any](ctx context.Context, c *Client, hreq *http.Request, what string, each func(*E) (*R, error)) (*R, error) {
	hreq.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(hreq)
	if err != nil {
		return nil, err
	}
	defer closeBody(resp.Body)
	dec := json.NewDecoder(resp.Body)
	for {
		var ev E
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				return nil, errors.New(what + " stream ended without a result")
			}
			return nil, fmt.Errorf("read %s stream: %w", what, err)
		}
		if r, err := each(&ev); err != nil || r != nil {
			return r, err
		}
	}
}
