package api

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
)

type oaSchema struct {
	Ref        string               `json:"$ref"`
	Type       string               `json:"type"`
	Format     string               `json:"format"`
	Properties map[string]*oaSchema `json:"properties"`
	Required   []string             `json:"required"`
	Items      *oaSchema            `json:"items"`
	AddProps   *oaSchema            `json:"additionalProperties"`
}

type oaDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]*oaSchema `json:"schemas"`
	} `json:"components"`
}

func loadDoc(t *testing.T) oaDoc {
	t.Helper()
	var doc oaDoc
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.json is not valid JSON: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.0") {
		t.Fatalf("openapi = %q, want 3.0.x", doc.OpenAPI)
	}
	return doc
}

// TestOpenAPIErrorStatuses: every error status the API uses is described
// with the error body somewhere. Which routes exist, with which method,
// path, scopes and error answers, is checked against the server's route
// table itself (internal/server TestRoutesDocumented), not a copy here.
func TestOpenAPIErrorStatuses(t *testing.T) {
	loadDoc(t)
	for _, code := range []string{"400", "401", "403", "404", "409", "413", "429"} {
		if !strings.Contains(string(OpenAPI), `"`+code+`": {`) {
			t.Errorf("status %s appears in no operation", code)
		}
	}
}

// TestOpenAPIRefsResolve checks that every $ref points at a component.
func TestOpenAPIRefsResolve(t *testing.T) {
	var root map[string]any
	if err := json.Unmarshal(OpenAPI, &root); err != nil {
		t.Fatal(err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				cur := any(root)
				for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
					m, _ := cur.(map[string]any)
					cur = m[part]
				}
				if cur == nil {
					t.Errorf("unresolved $ref %q", ref)
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(root)
}

// TestOpenAPISchemasMatchTypes checks each component schema against the Go
// type of the same name: the same JSON fields, of matching kinds, with the
// fields that are always sent (no omitempty) marked required.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	doc := loadDoc(t)
	types := []any{
		Error{}, ErrorBody{}, Resources{}, CreateSandboxRequest{}, Isolation{}, Sandbox{},
		ExecRequest{}, ExecExit{}, ExecEvent{}, Resize{}, RunRequest{}, FileInfo{}, Template{},
		ImportTemplateRequest{}, BuildTemplateRequest{}, BuildEvent{}, Event{}, DoctorFinding{},
		DoctorReport{}, Version{}, Policy{}, VolumeMount{}, Volume{}, CreateVolumeRequest{}, DiffEntry{},
		ForkRequest{}, ForkResponse{}, Lineage{}, Snapshot{}, CreateSnapshotRequest{}, ExportRequest{},
		CopyRequest{}, PoolRequest{}, Pool{}, ApplyRequest{}, Disk{}, Quota{}, QuotaRequest{}, QuotaUsage{},
		StartProcessRequest{}, Process{}, ProcessList{}, ProcessEvent{}, SignalRequest{}, TemplateService{},
		RuntimeClass{}, RuntimeCaps{}, PushTemplateRequest{}, PushResult{}, PushEvent{}, ImportProgress{}, RegistryAuth{},
		WhoAmI{}, Webhook{}, WebhookDelivery{}, SandboxUsage{},
	}
	for _, v := range types {
		rt := reflect.TypeOf(v)
		t.Run(rt.Name(), func(t *testing.T) {
			s := doc.Components.Schemas[rt.Name()]
			if s == nil {
				t.Fatalf("no schema %s", rt.Name())
			}
			var fields, required []string
			for _, f := range jsonFields(rt) {
				name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
				if name == "" || name == "-" {
					t.Errorf("field %s has no JSON name", f.Name)
					continue
				}
				fields = append(fields, name)
				if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
					required = append(required, name)
				}
				p := s.Properties[name]
				if p == nil {
					t.Errorf("field %s missing from schema", name)
					continue
				}
				checkKind(t, name, f.Type, p)
			}
			for name := range s.Properties {
				if !slices.Contains(fields, name) {
					t.Errorf("schema property %s is not a field of %s", name, rt.Name())
				}
			}
			got := slices.Clone(s.Required)
			slices.Sort(got)
			slices.Sort(required)
			if !slices.Equal(got, required) {
				t.Errorf("required = %v, want %v", got, required)
			}
		})
	}
}

// jsonFields lists the fields of rt as encoding/json sees them: the fields
// of an embedded struct without a JSON name are promoted into rt's object
// (as CreateSandboxRequest's Policy is), fields named "-" dropped.
func jsonFields(rt reflect.Type) []reflect.StructField {
	var out []reflect.StructField
	for i := range rt.NumField() {
		f := rt.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		out = append(out, f)
	}
	return out
}

// TestOpenAPIEmbeddedPolicyIsFlat checks the reflection above against
// encoding/json itself: a create request's policy fields are top-level keys.
func TestOpenAPIEmbeddedPolicyIsFlat(t *testing.T) {
	b, err := json.Marshal(CreateSandboxRequest{Policy: Policy{IdleTimeoutSeconds: 1, OnIdle: "stop"}})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["idle_timeout_seconds"] != 1.0 || m["on_idle"] != "stop" {
		t.Errorf("create request JSON = %s, want flat policy fields", b)
	}
	doc := loadDoc(t)
	for _, f := range jsonFields(reflect.TypeOf(Policy{})) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if doc.Components.Schemas["CreateSandboxRequest"].Properties[name] == nil {
			t.Errorf("CreateSandboxRequest schema lacks policy field %s", name)
		}
	}
}

func checkKind(t *testing.T, name string, rt reflect.Type, s *oaSchema) {
	t.Helper()
	if rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	want := ""
	switch {
	case rt == reflect.TypeOf(time.Time{}):
		if s.Type != "string" || s.Format != "date-time" {
			t.Errorf("%s: want string/date-time, got %s/%s", name, s.Type, s.Format)
		}
		return
	case rt.Kind() == reflect.Slice && rt.Elem().Kind() == reflect.Uint8:
		if s.Type != "string" || s.Format != "byte" {
			t.Errorf("%s: want string/byte, got %s/%s", name, s.Type, s.Format)
		}
		return
	case rt.Kind() == reflect.Struct:
		if s.Ref != "#/components/schemas/"+rt.Name() {
			t.Errorf("%s: want $ref to %s, got %q", name, rt.Name(), s.Ref)
		}
		return
	case rt.Kind() == reflect.Slice:
		if s.Type != "array" || s.Items == nil {
			t.Errorf("%s: want array, got %q", name, s.Type)
			return
		}
		checkKind(t, name+"[]", rt.Elem(), s.Items)
		return
	case rt.Kind() == reflect.Map:
		want = "object"
	case rt.Kind() == reflect.String:
		want = "string"
	case rt.Kind() == reflect.Bool:
		want = "boolean"
	case rt.Kind() >= reflect.Int && rt.Kind() <= reflect.Uint64:
		want = "integer"
	case rt.Kind() == reflect.Float32 || rt.Kind() == reflect.Float64:
		want = "number"
	default:
		t.Errorf("%s: unhandled Go kind %s", name, rt.Kind())
		return
	}
	if s.Type != want {
		t.Errorf("%s: type %q, want %q", name, s.Type, want)
	}
}

// TestOpenAPISuccessStatus checks the success status and body type of the
// routes whose answer is not a plain 200 JSON object.
func TestOpenAPISuccessStatus(t *testing.T) {
	doc := loadDoc(t)
	for _, tc := range []struct {
		route, status, contentType, schema string
	}{
		{"POST /v1/sandboxes/{id}/fork", "201", "application/json", "#/components/schemas/ForkResponse"},
		{"POST /v1/sandboxes/{id}/snapshots", "201", "application/json", "#/components/schemas/Snapshot"},
		{"GET /v1/sandboxes/{id}/snapshots", "200", "application/json", ""},
		{"GET /v1/snapshots", "200", "application/json", ""},
		{"DELETE /v1/snapshots/{id}", "204", "", ""},
		{"POST /v1/snapshots/{id}/restore", "200", "application/json", "#/components/schemas/Sandbox"},
		{"POST /v1/sandboxes/{id}/export", "200", "application/x-tar", ""},
		{"POST /v1/copy", "204", "", ""},
		{"PUT /v1/templates/{name}/pool", "200", "application/json", "#/components/schemas/Pool"},
		{"GET /v1/pools", "200", "application/json", ""},
		{"POST /v1/apply", "200", "application/x-ndjson", "#/components/schemas/BuildEvent"},
		{"POST /v1/templates/{name}/push", "200", "application/json", "#/components/schemas/PushResult"},
		{"POST /v1/templates/{name}/push", "200", "application/x-ndjson", "#/components/schemas/PushEvent"},
	} {
		method, path, _ := strings.Cut(tc.route, " ")
		var op struct {
			Responses map[string]struct {
				Content map[string]struct {
					Schema oaSchema `json:"schema"`
				} `json:"content"`
			} `json:"responses"`
		}
		if err := json.Unmarshal(doc.Paths[path][strings.ToLower(method)], &op); err != nil {
			t.Errorf("%s: %v", tc.route, err)
			continue
		}
		resp, ok := op.Responses[tc.status]
		if !ok {
			t.Errorf("%s: no %s response", tc.route, tc.status)
			continue
		}
		if tc.contentType == "" {
			if len(resp.Content) != 0 {
				t.Errorf("%s: %s has a body", tc.route, tc.status)
			}
			continue
		}
		c, ok := resp.Content[tc.contentType]
		if !ok {
			t.Errorf("%s: %s is not %s", tc.route, tc.status, tc.contentType)
			continue
		}
		if tc.schema != "" && c.Schema.Ref != tc.schema {
			t.Errorf("%s: schema %q, want %q", tc.route, c.Schema.Ref, tc.schema)
		}
	}
}

// TestOpenAPIIdempotencyKey: the routes that take an Idempotency-Key say
// so, with the answers it brings.
func TestOpenAPIIdempotencyKey(t *testing.T) {
	doc := loadDoc(t)
	for _, path := range []string{"/v1/sandboxes", "/v1/sandboxes/{id}/fork", "/v1/sandboxes/{id}/snapshots", "/v1/volumes"} {
		var op struct {
			Parameters []struct {
				Ref string `json:"$ref"`
			} `json:"parameters"`
			Responses map[string]json.RawMessage `json:"responses"`
		}
		if err := json.Unmarshal(doc.Paths[path]["post"], &op); err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		if !slices.ContainsFunc(op.Parameters, func(p struct {
			Ref string `json:"$ref"`
		}) bool {
			return p.Ref == "#/components/parameters/IdempotencyKey"
		}) {
			t.Errorf("POST %s does not document the Idempotency-Key header", path)
		}
		for _, code := range []string{"400", "409", "422"} {
			if op.Responses[code] == nil {
				t.Errorf("POST %s does not document its %s answer", path, code)
			}
		}
	}
	for _, code := range []string{"invalid_idempotency_key", "idempotency_key_reused", "idempotency_in_progress"} {
		if !strings.Contains(string(OpenAPI), code) {
			t.Errorf("error code %s is not documented", code)
		}
	}
}

// TestOpenAPIValid: the document is valid OpenAPI 3 as kin-openapi (the
// validator the SDK generators' toolchains share) reads it: every path
// parameter declared, every $ref resolved, every schema well formed.
func TestOpenAPIValid(t *testing.T) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(OpenAPI)
	if err != nil {
		t.Fatalf("loading api/openapi.json: %v", err)
	}
	if err := doc.Validate(loader.Context, openapi3.EnableExamplesValidation()); err != nil {
		t.Fatalf("api/openapi.json is not valid OpenAPI 3: %v", err)
	}
}
