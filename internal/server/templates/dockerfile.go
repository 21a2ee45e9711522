package templates

import (
	"encoding/json"
	"net/http"
	"strings"

	enginetemplates "github.com/berth-sh/berth/internal/engine/templates"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
)

// BuildDockerfile is POST /v1/templates/{name}/dockerfile: the body is
// the build context (a tar archive holding the Dockerfile), the query
// names the Dockerfile, target, build arguments and the RUN steps'
// network; the answer is the NDJSON stream of a build.
func (h *Handlers) BuildDockerfile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := &enginetemplates.DockerfileRequest{Name: r.PathValue("name"), Dockerfile: q.Get("dockerfile"), Target: q.Get("target"),
		Context: r.Body, Network: enginetemplates.BuildNetwork{Mode: q.Get("network"), Allow: q["allow"]}}
	for _, f := range [][2]string{{"dockerfile", req.Dockerfile}, {"target", req.Target}, {"network", req.Network.Mode}} {
		if err := sandbox.CheckText(f[0], f[1]); err != nil {
			rest.Error(w, err)
			return
		}
	}
	for _, a := range req.Network.Allow {
		if err := sandbox.CheckText("allow rule", a); err != nil {
			rest.Error(w, err)
			return
		}
	}
	if ba := q.Get("buildargs"); ba != "" {
		if err := json.Unmarshal([]byte(ba), &req.BuildArgs); err != nil {
			rest.Error(w, errdefs.Invalid("buildargs: want a JSON object of strings: %v", err))
			return
		}
		for k, v := range req.BuildArgs {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
				rest.Error(w, errdefs.Invalid("buildargs: bad argument %q", k))
				return
			}
		}
	}
	if t := q.Get("timeout_seconds"); t != "" {
		var secs float64
		if err := json.Unmarshal([]byte(t), &secs); err != nil || !(secs >= 0 && secs <= sandbox.MaxTimeout.Seconds()) {
			rest.Error(w, errdefs.Invalid("timeout_seconds: want a number of seconds"))
			return
		}
		req.Timeout = input.TimeoutSeconds(secs)
	}
	buildStream(w, ToAPI, func(progress func(enginetemplates.Event)) (*store.Template, error) {
		return h.E.BuildDockerfile(r.Context(), req, rest.Actor(r), progress)
	})
}
