package server

import (
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
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
		rule := rt.Op.Rule()
		for _, sc := range rule.Scopes {
			scopes = append(scopes, string(sc))
		}
		var types map[string]any
		if strings.Contains(path, "{port}") {
			types = map[string]any{"port": 0} // a TCP port, parsed as such
		}
		var headers map[string]any
		if rt.Query != nil && paged(reflect.TypeOf(rt.Query)) {
			headers = map[string]any{api.NextCursorHeader: map[string]any{"$ref": "#/components/headers/NextCursor"}}
		}
		var errs map[int]string
		in := rt.In
		if opt, ok := in.(openapi.Optional); ok {
			in = opt.Body
		}
		if in != nil && reflect.TypeOf(in).PkgPath() == reflect.TypeOf(api.Sandbox{}).PkgPath() {
			// A JSON body is read through input.Decode, whose cap
			// answers 413.
			errs = map[int]string{http.StatusRequestEntityTooLarge: errorResponses[http.StatusRequestEntityTooLarge]}
		}
		var params []any
		if rt.Idem != nil {
			// The Idempotency-Key header, and what it may answer: a
			// retry while the first runs (409), a key reused with
			// another request (422).
			params = []any{map[string]any{"$ref": "#/components/parameters/IdempotencyKey"}}
			if errs == nil {
				errs = map[int]string{}
			}
			for _, code := range []int{http.StatusConflict, http.StatusUnprocessableEntity} {
				errs[code] = errorResponses[code]
			}
		}
		ops = append(ops, openapi.Operation{Method: method, Path: strings.ReplaceAll(path, "...}", "}"), PathTypes: types,
			Headers: headers, Stream: rt.Stream, Errors: errs, Params: params,
			Scopes: scopes, Lease: rule.Lease, Host: rule.Host, Public: rule.Public,
			PublicPort: rt.PublicPort, Query: rt.Query, Body: rt.In, Answers: rt.Out})
	}
	return ops
}

// paged reports whether query type t is or embeds api.Page: its route pages,
// announcing the next page in a header.
func paged(t reflect.Type) bool {
	if t == reflect.TypeOf(api.Page{}) {
		return true
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct && paged(f.Type) {
			return true
		}
	}
	return false
}

// GenerateOpenAPI is api/openapi.json as the route table, the api
// types (with their doc comments in apiDir) and overlay make it.
func GenerateOpenAPI(overlay []byte, apiDir string, draft bool) ([]byte, error) {
	return openapi.Generate(OpenAPIOperations(Routes()), openapi.Config{Overlay: overlay, APIDir: apiDir, Draft: draft,
		// The error body every error answer carries (components.responses).
		Extra: []any{api.ErrorBody{}},
		// Every stable error code with its status, as the API edge maps
		// errors (errdefs.Code).
		Facts: errorFacts()})
}

// errorResponses are the error answers of the document
// (components.responses) by the status they stand for; Error is every
// other status.
var errorResponses = map[int]string{400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
	409: "Conflict", 413: "TooLarge", 422: "UnprocessableEntity", 429: "TooManyRequests", 507: "InsufficientStorage"}

// errorFacts are the stable error codes as the document lists them:
// all of them on the error body's code, and on each error answer those
// of its status.
func errorFacts() map[string]any {
	facts := map[string]any{"/components/schemas/Error/properties/code/x-berth-codes": errdefs.Codes()}
	by := map[string][]string{}
	for _, c := range errdefs.Codes() {
		name, ok := errorResponses[c.Status]
		if !ok {
			name = "Error"
		}
		if !slices.Contains(by[name], c.Code) {
			by[name] = append(by[name], c.Code)
		}
	}
	for name, codes := range by {
		facts["/components/responses/"+name+"/x-berth-codes"] = codes
	}
	return facts
}
