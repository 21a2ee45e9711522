package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/berth-sh/berth/api"
)

// DockerfileOptions are a Dockerfile build's parameters besides its
// context.
type DockerfileOptions struct {
	// Dockerfile is the Dockerfile's name in the context ("Dockerfile"
	// if empty).
	Dockerfile string
	// Target is the stage to build ("" : the last).
	Target    string
	BuildArgs map[string]string
	// Network and Allow are the RUN steps' network ("none" by default;
	// "egress" with allow rules).
	Network string
	Allow   []string
	// TimeoutSeconds bounds each RUN (0: an hour).
	TimeoutSeconds float64
}

// BuildDockerfile builds template name from a Dockerfile: buildContext is
// a tar archive of the build context holding the Dockerfile. Build output
// is written to progress (if non-nil) as it comes.
func (c *Client) BuildDockerfile(ctx context.Context, name string, buildContext io.Reader, opt DockerfileOptions, progress io.Writer) (*api.Template, error) {
	q := url.Values{}
	if opt.Dockerfile != "" {
		q.Set("dockerfile", opt.Dockerfile)
	}
	if opt.Target != "" {
		q.Set("target", opt.Target)
	}
	if len(opt.BuildArgs) > 0 {
		b, err := json.Marshal(opt.BuildArgs)
		if err != nil {
			return nil, fmt.Errorf("encode build args: %w", err)
		}
		q.Set("buildargs", string(b))
	}
	if opt.Network != "" {
		q.Set("network", opt.Network)
	}
	for _, a := range opt.Allow {
		q.Add("allow", a)
	}
	if opt.TimeoutSeconds > 0 {
		q.Set("timeout_seconds", strconv.FormatFloat(opt.TimeoutSeconds, 'f', -1, 64))
	}
	hreq, err := c.newRequest(ctx, http.MethodPost, "/v1/templates/"+pathEscape(name)+"/dockerfile", q, buildContext)
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/x-tar")
	setContentLength(hreq, buildContext)
	return c.readBuildStream(ctx, hreq, progress)
}
