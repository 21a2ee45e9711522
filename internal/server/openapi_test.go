package server

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/openapi"
	"sigs.k8s.io/yaml"
)

// TestOpenAPIGenerated: the checked-in api/openapi.json (the document
// the daemon serves) is byte for byte what the route table, the api
// types and the overlay generate. make lint checks the same through
// openapigen -check.
func TestOpenAPIGenerated(t *testing.T) {
	overlay, err := os.ReadFile("../../api/openapi-overlay.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := GenerateOpenAPI(overlay, "../../api", false)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, api.OpenAPI) {
		t.Fatal("api/openapi.json is not what the code generates: run go generate ./api")
	}
}

// TestOpenAPIOverlayCannotContradict: the overlay may add prose, not
// facts that the code decides; each of these overlays is refused.
func TestOpenAPIOverlayCannotContradict(t *testing.T) {
	overlay, err := os.ReadFile("../../api/openapi-overlay.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, patch, want string }{
		{"a field the type lacks", `{"components":{"schemas":{"Sandbox":{"properties":{"no_such_field":{"description":"x"}}}}}}`, "no field"},
		{"a schema no route reaches", `{"components":{"schemas":{"NoSuchType":{"description":"x"}}}}`, "no route's type"},
		{"another type for a field", `{"components":{"schemas":{"Sandbox":{"properties":{"id":{"type":"integer"}}}}}}`, "contradicts"},
		{"a type for an untyped field", `{"components":{"schemas":{"AuditVerifyRequest":{"properties":{"anchor":{"type":"object"}}}}}}`, "shape"},
		{"another scope", `{"paths":{"/v1/sandboxes":{"get":{"x-berth-scopes":["admin"]}}}}`, "contradicts"},
		{"a route that is not", `{"paths":{"/v1/nothing":{"get":{"summary":"x"}}}}`, "no route"},
		{"a method that is not", `{"paths":{"/v1/sandboxes":{"put":{"summary":"x"}}}}`, "no route"},
		{"an answer the handler does not give", `{"paths":{"/v1/templates/{name}":{"delete":{"responses":{"200":{"description":"x"}}}}}}`, "not one the route declares"},
		{"a content type not declared", `{"paths":{"/v1/sandboxes/{id}":{"get":{"responses":{"200":{"content":{"text/plain":{}}}}}}}}`, "not one the route declares"},
		{"a query parameter the query type lacks", `{"paths":{"/v1/sandboxes":{"get":{"parameters":[{"name":"nope","in":"query"}]}}}}`, "no field of the route's query type"},
		{"another type for a query parameter", `{"paths":{"/v1/sandboxes":{"get":{"parameters":[{"name":"all","in":"query","schema":{"type":"string"}}]}}}}`, "contradicts"},
		{"a path parameter the pattern lacks", `{"paths":{"/v1/sandboxes/{id}":{"parameters":[{"name":"nope","in":"path","required":true}]}}}`, "not in the route's pattern"},
		{"a request body not declared", `{"paths":{"/v1/sandboxes/{id}":{"get":{"requestBody":{"content":{"application/json":{}}}}}}}`, "request body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var base, patch map[string]any
			js, err := yaml.YAMLToJSON(overlay)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(js, &base); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.patch), &patch); err != nil {
				t.Fatal(err)
			}
			deepSet(base, patch)
			b, _ := json.Marshal(base)
			_, err = GenerateOpenAPI(b, "../../api", false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("overlay with %s: err = %v, want one saying %q", tc.name, err, tc.want)
			}
		})
	}
}

// deepSet writes patch's leaves into dst.
func deepSet(dst, patch map[string]any) {
	for k, v := range patch {
		if pm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				deepSet(dm, pm)
				continue
			}
		}
		dst[k] = v
	}
}

// TestOpenAPIRoutesDeclareTypes: every documented route declares its
// answers (the generator refuses one that does not, so make lint
// fails), and a declared body and answer reach the document.
func TestOpenAPIRoutesDeclareTypes(t *testing.T) {
	for _, op := range OpenAPIOperations(Routes()) {
		if len(op.Answers) == 0 {
			t.Errorf("%s %s declares no answer", op.Method, op.Path)
		}
		if op.Method == "GET" && op.Body != nil {
			t.Errorf("%s %s: a GET with a body", op.Method, op.Path)
		}
	}
	if _, err := openapi.Generate([]openapi.Operation{{Method: "GET", Path: "/v1/x"}},
		openapi.Config{Overlay: []byte(`{}`), Draft: true}); err == nil || !strings.Contains(err.Error(), "no answer") {
		t.Errorf("a route without answers: err = %v", err)
	}
	// The generated document of a route table with one new route
	// carries its body and answer types.
	ops := []openapi.Operation{{Method: "POST", Path: "/v1/x/{id}", Scopes: []string{"exec"},
		Body: api.ExecRequest{}, Answers: []openapi.Answer{{Status: 201, Body: api.Process{}}}}}
	doc, err := openapi.Generate(ops, openapi.Config{Overlay: []byte(`{}`), Draft: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"$ref": "#/components/schemas/ExecRequest"`, `"201"`, `"$ref": "#/components/schemas/Process"`,
		`"name": "id"`, `"x-berth-scopes": [`} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("generated document lacks %s", want)
		}
	}
}

// TestOpenAPIErrorCodes: the document lists every stable error code the
// API edge gives (errdefs.Code), with its status, on the error body's
// code, and each on the error answer of its status.
func TestOpenAPIErrorCodes(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas struct {
				Error struct {
					Properties struct {
						Code struct {
							Codes []errdefs.StatusCode `json:"x-berth-codes"`
						} `json:"code"`
					} `json:"properties"`
				}
			} `json:"schemas"`
			Responses map[string]struct {
				Codes []string `json:"x-berth-codes"`
			} `json:"responses"`
		} `json:"components"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	listed := doc.Components.Schemas.Error.Properties.Code.Codes
	for _, c := range []errdefs.StatusCode{{Code: "invalid_argument", Status: 400}, {Code: "quota_exceeded", Status: 429},
		{Code: "rate_limited", Status: 429}, {Code: "limit_exceeded", Status: 400}, {Code: "limit_exceeded", Status: 429},
		{Code: "egress_secret_needs_egress", Status: 400}, {Code: "internal", Status: 500}} {
		if !slices.Contains(listed, c) {
			t.Errorf("Error.code does not list %v", c)
		}
	}
	if !slices.Equal(listed, errdefs.Codes()) {
		t.Errorf("Error.code lists %v, errdefs %v", listed, errdefs.Codes())
	}
	for _, c := range errdefs.Codes() {
		name, ok := errorResponses[c.Status]
		if !ok {
			name = "Error"
		}
		if !slices.Contains(doc.Components.Responses[name].Codes, c.Code) {
			t.Errorf("error answer %s does not list %s (%d)", name, c.Code, c.Status)
		}
	}
}

// TestOpenAPIPagedLists: a route whose query is paged (api.Page) answers
// with the next page's cursor in a header, and the document says so —
// also for the lists the hand-written document had missed.
func TestOpenAPIPagedLists(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	headers := func(path, method string) map[string]any {
		var op struct {
			Responses map[string]struct {
				Headers map[string]any `json:"headers"`
			} `json:"responses"`
		}
		if err := json.Unmarshal(doc.Paths[path][method], &op); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return op.Responses["200"].Headers
	}
	n := 0
	for _, rt := range Routes() {
		if rt.Query == nil || !paged(reflect.TypeOf(rt.Query)) {
			continue
		}
		n++
		method, path, _ := strings.Cut(rt.Pattern, " ")
		if headers(path, strings.ToLower(method))[api.NextCursorHeader] == nil {
			t.Errorf("%s pages but does not document %s", rt.Pattern, api.NextCursorHeader)
		}
	}
	for _, want := range []string{"/v1/keys", "/v1/secrets", "/v1/audit", "/v1/sandboxes"} {
		if headers(want, "get")[api.NextCursorHeader] == nil {
			t.Errorf("GET %s does not document %s", want, api.NextCursorHeader)
		}
	}
	if n < 10 {
		t.Errorf("only %d paged routes", n)
	}
}

// TestOpenAPIJSONBodiesAnswer413: a route whose JSON body input.Decode
// reads can answer 413 too_large, and the document says so (the
// hand-written one missed it on 16 routes and named the wrong answer on
// PUT /v1/secrets/{name}).
func TestOpenAPIJSONBodiesAnswer413(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	for _, tc := range [][2]string{{"post", "/v1/keys"}, {"put", "/v1/secrets/{name}"}, {"post", "/v1/sandboxes/{id}/processes"},
		{"post", "/v1/sandboxes"}, {"post", "/v1/audit/verify"}} {
		var op struct {
			Responses map[string]struct {
				Ref string `json:"$ref"`
			} `json:"responses"`
		}
		if err := json.Unmarshal(doc.Paths[tc[1]][tc[0]], &op); err != nil {
			t.Fatal(err)
		}
		if got := op.Responses["413"].Ref; got != "#/components/responses/TooLarge" {
			t.Errorf("%s %s: 413 is %q", tc[0], tc[1], got)
		}
	}
}
