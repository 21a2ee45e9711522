package server

import (
	"net/http"
	"slices"
	"strings"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/openapi"
)

// undocumented are the routes api/openapi.json leaves out: the
// catch-all 404, the redirects (the port proxy's to its trailing slash,
// / and /console to /console/), and the host-routed proxy (a host
// name, not a path).
var undocumented = []string{"/", "/v1/sandboxes/{id}/ports/{port}", HostPortPattern, "GET /{$}", "GET /console"}

// Documented reports whether the route of pattern is in the document.
func Documented(pattern string) bool { return !slices.Contains(undocumented, pattern) }

// OpenAPIOperations are the documented routes of table as the generator
// takes them. A route without a method (the port proxy, any method) is
// documented as GET; {rest...} is written {rest}.
func OpenAPIOperations(table []Route) []openapi.Operation {
	var ops []openapi.Operation
	for _, rt := range table {
		if !Documented(rt.Pattern) {
			continue
		}
		method, path, ok := strings.Cut(rt.Pattern, " ")
		if !ok {
			method, path = http.MethodGet, rt.Pattern
		}
		var scopes []string
		for _, sc := range rt.Rule.Scopes {
			scopes = append(scopes, string(sc))
		}
		ops = append(ops, openapi.Operation{Method: method, Path: strings.ReplaceAll(path, "...}", "}"),
			Scopes: scopes, Lease: rt.Rule.Lease, Host: rt.Rule.Host, Public: rt.Rule.Public,
			PublicPort: rt.PublicPort, Body: rt.In, Answers: rt.Out})
	}
	return ops
}

// GenerateOpenAPI is api/openapi.json as the route table, the api
// types (with their doc comments in apiDir) and overlay make it.
func GenerateOpenAPI(overlay []byte, apiDir string, draft bool) ([]byte, error) {
	return openapi.Generate(OpenAPIOperations(Routes()), openapi.Config{Overlay: overlay, APIDir: apiDir, Draft: draft,
		// The error body every error answer carries (components.responses).
		Extra: []any{api.ErrorBody{}}})
}
