// Package openapi generates api/openapi.json from the server's route
// table and the Go types of package api, so that each field of the API
// has one definition: its Go type (name, JSON name, kind, required or
// not, doc comment). A route declares its request and answer types
// (Body, Answer) beside its pattern and rule; this package turns the
// table into paths and the types it reaches into components.
//
// What Go types cannot say — summaries, operation ids, tags, prose
// about errors, headers, query parameters, enums and examples — comes
// from a small overlay (api/openapi-overlay.yaml), merged onto the
// generated document under one rule: the overlay may add, and may
// replace prose (description, summary), but may not contradict a
// generated fact (a type, a required list, a scope), nor describe a
// field, schema or operation the code does not have. A field renamed in
// Go thus either updates the document or fails the build; it never
// leaves the document describing a field that is gone.
//
// The generator is plain reflection and go/ast rather than a library
// (kin-openapi, invopop/jsonschema): the document needs OpenAPI 3.0
// schemas of about 80 plain structs, flattening of embedded structs as
// encoding/json does, and byte-stable output for the lint check, which
// is less code written here than adapting a JSON-Schema reflector's
// 2020-12 output to 3.0 and its naming to ours.
package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Body is what a request or an answer carries: a value of an api type
// (sent as application/json; a slice value for a JSON array), or one of
// NDJSON, SSE, Bytes, Text, WebSocket, AnyJSON. nil is no body.
type Body any

// NDJSON is a stream of JSON values of Of's type, one per line
// (application/x-ndjson).
type NDJSON struct{ Of any }

// SSE is a server-sent event stream (text/event-stream) whose events'
// data are JSON values of Of's type.
type SSE struct{ Of any }

// Bytes is a body of raw bytes, of any of the content types listed.
type Bytes []string

// Text is a body of text of the content type given.
type Text string

// AnyJSON is a JSON object of no fixed schema.
type AnyJSON struct{}

// WebSocket is an answer that upgrades the connection: First is the
// JSON text message the client sends first, Messages the JSON payloads
// of the binary frames that follow (in both directions).
type WebSocket struct {
	First    any
	Messages []any
}

// Optional marks a request body the client may leave out.
type Optional struct{ Body Body }

// Answer is one success answer of a route: its status and body. Two
// answers of the same status are alternative content types.
type Answer struct {
	Status int
	Body   Body
}

// Operation is one documented route, as the route table declares it.
type Operation struct {
	Method, Path string // Path with {name} parameters; {rest...} is written {rest}
	Scopes       []string
	Lease        bool           // a sandbox's lease token may call it
	Host         bool           // the host's administrator alone
	Public       bool           // no credential
	PublicPort   bool           // no credential for a port its sandbox made public
	Query        any            // a struct whose fields tagged `query:"name[,required]"` are the query parameters
	PathTypes    map[string]any // a path parameter's Go type (a zero value) when it is not a string
	Headers      map[string]any // headers of the 200 answer, by name (a header object or a $ref)
	Stream       bool           // the request or answer may last as long as its work: no deadline
	Errors       map[int]string // error answers beyond the common ones: status -> components.responses name
	Params       []any          // parameters beyond the path's and the query's (a header's $ref, say)
	Body         Body
	Answers      []Answer
}

// Config is what Generate reads besides the operations.
type Config struct {
	// Overlay is the overlay document (api/openapi-overlay.yaml), YAML
	// (or JSON, which YAML includes).
	Overlay []byte
	// APIDir is the directory of package api's sources: the doc
	// comments of its types and fields become schema descriptions
	// where the overlay gives none. Empty: no doc comments.
	APIDir string
	// Extra are api types the document describes though no route
	// declares them (the body of an error, say).
	Extra []any
	// Facts are values the code decides beyond the types, by the JSON
	// pointer of the object key they set ("/components/schemas/Error/
	// properties/code/x-berth-codes"), set after the overlay's merge
	// (their objects may be the overlay's): the overlay cannot
	// contradict them either. Each value must marshal to JSON.
	Facts map[string]any
	// Draft skips the checks that every operation has an id and a
	// summary (to see what the code alone generates).
	Draft bool
}

// Generate returns the OpenAPI document of ops, indented, with a final
// newline.
func Generate(ops []Operation, cfg Config) ([]byte, error) {
	g := &gen{schemas: map[string]any{}, types: map[string]reflect.Type{}, order: map[string][]string{}}
	if cfg.APIDir != "" {
		var err error
		if g.docs, err = readDocs(cfg.APIDir); err != nil {
			return nil, err
		}
	}
	for _, v := range cfg.Extra {
		g.schema(reflect.TypeOf(v))
	}
	paths := map[string]any{}
	for _, op := range ops {
		item, _ := paths[op.Path].(map[string]any)
		if item == nil {
			item = map[string]any{}
			if ps := g.pathParams(op.Path, op.PathTypes); len(ps) > 0 {
				item["parameters"] = ps
			}
			paths[op.Path] = item
			g.order["/paths"] = append(g.order["/paths"], op.Path)
		}
		m := strings.ToLower(op.Method)
		if item[m] != nil {
			return nil, fmt.Errorf("openapi: %s %s declared twice", op.Method, op.Path)
		}
		o, err := g.operation(op)
		if err != nil {
			return nil, fmt.Errorf("openapi: %s %s: %w", op.Method, op.Path, err)
		}
		item[m] = o
	}
	out := map[string]any{
		"openapi":    "3.0.3",
		"paths":      paths,
		"components": map[string]any{"schemas": g.schemas},
		// On the unix socket no credential is needed; over TCP, a bearer.
		"security": []any{map[string]any{}, map[string]any{"bearerAuth": []any{}}},
	}
	var overlay map[string]any
	js, err := yaml.YAMLToJSON(cfg.Overlay)
	if err != nil {
		return nil, fmt.Errorf("openapi: overlay: %w", err)
	}
	if err := json.Unmarshal(js, &overlay); err != nil {
		return nil, fmt.Errorf("openapi: overlay: %w", err)
	}
	if err := checkOverlay(overlay, out); err != nil {
		return nil, err
	}
	m := merger{params: map[string]string{}}
	if comps, ok := overlay["components"].(map[string]any); ok {
		ps, _ := comps["parameters"].(map[string]any)
		for name, p := range ps {
			pm, _ := p.(map[string]any)
			m.params["#/components/parameters/"+name] = paramKey(pm, nil)
		}
	}
	if err := m.merge(out, overlay, ""); err != nil {
		return nil, err
	}
	for ptr, v := range cfg.Facts {
		if err := setFact(out, ptr, v); err != nil && !cfg.Draft { // a draft lacks the overlay's objects
			return nil, err
		}
	}
	if !cfg.Draft {
		if err := finish(out); err != nil {
			return nil, err
		}
	}
	var compact bytes.Buffer
	if err := g.encode(&compact, out, ""); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, compact.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

// encode writes v as compact JSON with its objects' keys in the order a
// reader expects: paths in the route table's order, schemas in the order
// the routes reach them, properties in their Go fields' order, statuses
// ascending, and the rest by keyOrder.
func (g *gen) encode(w *bytes.Buffer, v any, at string) error {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		g.sortKeys(keys, at)
		w.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				w.WriteByte(',')
			}
			if err := leaf(w, k); err != nil {
				return err
			}
			w.WriteByte(':')
			if err := g.encode(w, v[k], at+"/"+k); err != nil {
				return err
			}
		}
		w.WriteByte('}')
	case []any:
		w.WriteByte('[')
		for i, x := range v {
			if i > 0 {
				w.WriteByte(',')
			}
			if err := g.encode(w, x, at+"/"+strconv.Itoa(i)); err != nil {
				return err
			}
		}
		w.WriteByte(']')
	default:
		return leaf(w, v)
	}
	return nil
}

func leaf(w *bytes.Buffer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	w.Truncate(w.Len() - 1) // Encode's newline
	return nil
}

// keyOrder is the order of the keys of an OpenAPI object; others follow,
// by name, extensions (x-) last.
var keyOrder = []string{"openapi", "info", "servers", "security", "tags", "paths", "components", "title", "version",
	"operationId", "summary", "description", "name", "in", "required", "type", "format", "$ref",
	"items", "additionalProperties", "properties", "parameters", "requestBody", "content", "schema",
	"headers", "responses"}

func (g *gen) sortKeys(keys []string, at string) {
	if fixed, ok := g.order[at]; ok {
		pos := map[string]int{}
		for i, k := range fixed {
			pos[k] = i
		}
		sort.SliceStable(keys, func(i, j int) bool {
			pi, iok := pos[keys[i]]
			pj, jok := pos[keys[j]]
			if iok != jok {
				return iok
			}
			if !iok {
				return keys[i] < keys[j]
			}
			return pi < pj
		})
		return
	}
	if strings.HasSuffix(at, "/responses") {
		sort.Slice(keys, func(i, j int) bool {
			if keys[i] == "default" || keys[j] == "default" {
				return keys[j] == "default" && keys[i] != "default"
			}
			return keys[i] < keys[j]
		})
		return
	}
	rank := func(k string) int {
		if i := slices.Index(keyOrder, k); i >= 0 {
			return i
		}
		if strings.HasPrefix(k, "x-") {
			return len(keyOrder) + 1
		}
		return len(keyOrder)
	}
	sort.Slice(keys, func(i, j int) bool {
		ri, rj := rank(keys[i]), rank(keys[j])
		if ri != rj {
			return ri < rj
		}
		return keys[i] < keys[j]
	})
}

// setFact sets the key at JSON pointer ptr of doc to v (as JSON reads
// it), under objects that must exist (made by the code or the overlay);
// an overlay that set that key otherwise contradicts the code.
func setFact(doc map[string]any, ptr string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var val any
	if err := json.Unmarshal(b, &val); err != nil {
		return err
	}
	parts := strings.Split(strings.TrimPrefix(ptr, "/"), "/")
	cur := doc
	for _, p := range parts[:len(parts)-1] {
		next, ok := cur[p].(map[string]any)
		if !ok {
			return fmt.Errorf("openapi: fact %s: no object at %s", ptr, p)
		}
		cur = next
	}
	last := parts[len(parts)-1]
	if old, ok := cur[last]; ok && !reflect.DeepEqual(old, val) {
		return fmt.Errorf("openapi: overlay %s = %v contradicts the code's %v", ptr, old, val)
	}
	cur[last] = val
	return nil
}

// pathParams are the path parameters of path, strings unless types
// says otherwise.
func (g *gen) pathParams(path string, types map[string]any) []any {
	var out []any
	for rest := path; ; {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			return out
		}
		j := strings.IndexByte(rest[i:], '}')
		name := rest[i+1 : i+j]
		schema := map[string]any{"type": "string"}
		if t, ok := types[name]; ok {
			schema = g.schema(reflect.TypeOf(t))
		}
		out = append(out, map[string]any{"name": name, "in": "path", "required": true, "schema": schema})
		rest = rest[i+j+1:]
	}
}

// The error answers every /v1 route can give: bad input, no or a bad
// credential, a credential without the right, a rate or quota.
var commonErrors = map[string]string{"400": "BadRequest", "401": "Unauthorized", "403": "Forbidden",
	"429": "TooManyRequests", "default": "Error"}

func (g *gen) operation(op Operation) (map[string]any, error) {
	scopes := []any{}
	for _, s := range op.Scopes {
		scopes = append(scopes, s)
	}
	o := map[string]any{"x-berth-scopes": scopes, "x-berth-lease": op.Lease}
	if op.Host {
		o["x-berth-host"] = true
	}
	if op.PublicPort {
		o["x-berth-public-port"] = true
	}
	if op.Public {
		o["security"] = []any{}
	}
	if op.Query != nil {
		var params []any
		for _, f := range queryFields(reflect.TypeOf(op.Query)) {
			name, opt, _ := strings.Cut(f.Tag.Get("query"), ",")
			schema := g.schema(f.Type)
			if err := constraints(schema, f.Tag.Get("oa")); err != nil {
				return nil, fmt.Errorf("%s.%s: %w", f.owner, f.Name, err)
			}
			p := map[string]any{"name": name, "in": "query", "required": opt == "required", "schema": schema}
			if f.Type.Kind() == reflect.Slice {
				p["style"], p["explode"] = "form", true // ?type=a&type=b
			}
			if d := g.docs[f.owner+"."+f.Name]; d != "" {
				p["description"] = describe(d, f.Name)
			}
			params = append(params, p)
		}
		o["parameters"] = params
	}
	if len(op.Params) > 0 {
		ps, _ := o["parameters"].([]any)
		o["parameters"] = append(ps, op.Params...)
	}
	if op.Body != nil {
		required := true
		b := op.Body
		if opt, ok := b.(Optional); ok {
			required, b = false, opt.Body
		}
		content, err := g.content(b)
		if err != nil {
			return nil, err
		}
		o["requestBody"] = map[string]any{"required": required, "content": content}
	}
	if len(op.Answers) == 0 {
		return nil, fmt.Errorf("no answer declared")
	}
	responses := map[string]any{}
	for _, a := range op.Answers {
		key := strconv.Itoa(a.Status)
		r, _ := responses[key].(map[string]any)
		if r == nil {
			r = map[string]any{"description": statusText(a.Status)}
			responses[key] = r
		}
		if ws, ok := a.Body.(WebSocket); ok {
			if a.Status != 101 {
				return nil, fmt.Errorf("a WebSocket answers 101")
			}
			o["x-berth-websocket"] = g.websocket(ws)
			continue
		}
		if a.Body == nil {
			continue
		}
		content, err := g.content(a.Body)
		if err != nil {
			return nil, err
		}
		c, _ := r["content"].(map[string]any)
		if c == nil {
			c = map[string]any{}
			r["content"] = c
		}
		for k, v := range content {
			if c[k] != nil {
				return nil, fmt.Errorf("status %d declares %s twice", a.Status, k)
			}
			c[k] = v
		}
	}
	if len(op.Headers) > 0 {
		r, _ := responses["200"].(map[string]any)
		if r == nil {
			return nil, fmt.Errorf("headers declared without a 200 answer")
		}
		r["headers"] = maps.Clone(op.Headers)
	}
	if op.Stream {
		o["x-berth-stream"] = true
	}
	if strings.HasPrefix(op.Path, "/v1/") && !op.Public {
		for code, name := range commonErrors {
			responses[code] = ref("responses", name)
		}
	}
	for code, name := range op.Errors {
		responses[strconv.Itoa(code)] = ref("responses", name)
	}
	o["responses"] = responses
	return o, nil
}

func statusText(code int) string {
	switch code {
	case 101:
		return "Switching to WebSocket."
	case 204:
		return "Done; no body."
	}
	return "OK."
}

func (g *gen) websocket(ws WebSocket) map[string]any {
	out := map[string]any{}
	if ws.First != nil {
		out["first_message"] = g.schema(reflect.TypeOf(ws.First))
	}
	var msgs []any
	for _, m := range ws.Messages {
		msgs = append(msgs, g.schema(reflect.TypeOf(m)))
	}
	if len(msgs) > 0 {
		out["messages"] = msgs
	}
	return out
}

// content is the content map of a body.
func (g *gen) content(b Body) (map[string]any, error) {
	binary := map[string]any{"type": "string", "format": "binary"}
	switch b := b.(type) {
	case NDJSON:
		return map[string]any{"application/x-ndjson": map[string]any{"schema": g.schema(reflect.TypeOf(b.Of))}}, nil
	case SSE:
		return map[string]any{"text/event-stream": map[string]any{"schema": map[string]any{"type": "string"},
			"x-berth-event-data": g.schema(reflect.TypeOf(b.Of))}}, nil
	case Bytes:
		c := map[string]any{}
		for _, t := range b {
			c[t] = map[string]any{"schema": binary}
		}
		return c, nil
	case Text:
		return map[string]any{string(b): map[string]any{"schema": map[string]any{"type": "string"}}}, nil
	case AnyJSON:
		return map[string]any{"application/json": map[string]any{"schema": map[string]any{"type": "object"}}}, nil
	case WebSocket, Optional:
		return nil, fmt.Errorf("%T is not a body here", b)
	}
	t := reflect.TypeOf(b)
	if k := t.Kind(); k != reflect.Struct && k != reflect.Slice {
		return nil, fmt.Errorf("body of type %s: want an api struct or a slice of one", t)
	}
	return map[string]any{"application/json": map[string]any{"schema": g.schema(t)}}, nil
}

// gen holds the component schemas made so far.
type gen struct {
	// order is the order of the keys of the object at a JSON pointer
	// ("/paths", "/components/schemas/X/properties"), where it is not
	// keyOrder's.
	order   map[string][]string
	schemas map[string]any
	types   map[string]reflect.Type
	docs    map[string]string // "Type" and "Type.Field" -> doc comment
}

func ref(kind, name string) map[string]any {
	return map[string]any{"$ref": "#/components/" + kind + "/" + name}
}

var timeType = reflect.TypeOf(time.Time{})
var rawType = reflect.TypeOf(json.RawMessage{})

// schema returns the schema of t: a $ref for a named struct (whose
// component it makes), inline for the rest.
func (g *gen) schema(t reflect.Type) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t == rawType:
		return map[string]any{}
	case t == reflect.TypeOf(AnyJSON{}):
		return map[string]any{"type": "object"}
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		return map[string]any{"type": "string", "format": "byte"}
	}
	switch t.Kind() {
	case reflect.Struct:
		if t.Name() == "" {
			o, _ := g.object(t)
			return o
		}
		if prev, ok := g.types[t.Name()]; ok {
			if prev != t {
				panic(fmt.Sprintf("openapi: two types named %s: %s and %s", t.Name(), prev, t))
			}
			return ref("schemas", t.Name())
		}
		g.types[t.Name()] = t
		g.schemas[t.Name()] = nil // a placeholder against recursion
		g.order["/components/schemas"] = append(g.order["/components/schemas"], t.Name())
		o, names := g.object(t)
		g.schemas[t.Name()] = o
		g.order["/components/schemas/"+t.Name()+"/properties"] = names
		return ref("schemas", t.Name())
	case reflect.Slice, reflect.Array:
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int64, reflect.Uint64:
		return map[string]any{"type": "integer", "format": "int64"}
	case reflect.Int32:
		return map[string]any{"type": "integer", "format": "int32"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return map[string]any{"type": "integer"}
	case reflect.Float64:
		return map[string]any{"type": "number", "format": "double"}
	case reflect.Float32:
		return map[string]any{"type": "number", "format": "float"}
	case reflect.Interface:
		return map[string]any{}
	}
	panic(fmt.Sprintf("openapi: no schema for Go type %s", t))
}

// object is the schema of struct t's JSON object, as encoding/json
// writes it.
func (g *gen) object(t reflect.Type) (map[string]any, []string) {
	props := map[string]any{}
	var required []any
	var names []string
	for _, f := range Fields(t) {
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		s := g.schema(f.Type)
		if d := g.docs[f.owner+"."+f.Name]; d != "" {
			// Beside a $ref too: OpenAPI 3.1 reads it there, 3.0
			// tools ignore it, and the SDKs' model generators read
			// $ref without allOf.
			s = maps.Clone(s)
			s["description"] = describe(d, f.Name)
		}
		if err := constraints(s, f.Tag.Get("oa")); err != nil {
			panic(fmt.Sprintf("openapi: %s.%s: %v", t.Name(), f.Name, err))
		}
		props[name] = s
		names = append(names, name)
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
			required = append(required, name)
		}
	}
	o := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		o["required"] = required
	}
	if d := g.docs[t.Name()]; d != "" {
		o["description"] = describe(d, t.Name())
	}
	return o, names
}

// Field is a struct field as encoding/json sees it, with the name of
// the struct that declares it.
type Field struct {
	reflect.StructField
	owner string
}

// Fields lists the fields of struct t as encoding/json sees them: the
// fields of an embedded struct without a JSON name are promoted into
// t's object, fields named "-" and unexported ones dropped.
func Fields(t reflect.Type) []Field {
	var out []Field
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, Fields(f.Type)...)
			continue
		}
		out = append(out, Field{f, t.Name()})
	}
	return out
}

// describe is a Go doc comment as an API description: without the Go
// name it begins with ("Path is the path inside the sandbox." reads
// "The path inside the sandbox.", "ReadOnly: the kernel..." "The
// kernel...").
func describe(doc, goName string) string {
	rest, ok := strings.CutPrefix(doc, goName+" ")
	if !ok {
		if rest, ok = strings.CutPrefix(doc, goName+": "); !ok {
			return doc
		}
	}
	for _, verb := range []string{"is ", "are "} {
		if r, ok := strings.CutPrefix(rest, verb); ok {
			rest = r
			break
		}
	}
	if rest == "" {
		return doc
	}
	return strings.ToUpper(rest[:1]) + rest[1:]
}

// constraints adds to schema the constraints of a field's oa tag:
// comma-separated key=value pairs (minimum=1,default=1000), a value read
// as JSON when it is a number or a boolean, else as a string.
func constraints(schema map[string]any, tag string) error {
	if tag == "" {
		return nil
	}
	for _, kv := range strings.Split(tag, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !allowedConstraint[k] {
			return fmt.Errorf("bad oa tag entry %q", kv)
		}
		var val any = v
		var x any
		if json.Unmarshal([]byte(v), &x) == nil {
			if _, isStr := x.(string); !isStr {
				val = x
			}
		}
		schema[k] = val
	}
	return nil
}

var allowedConstraint = map[string]bool{"minimum": true, "maximum": true, "default": true, "minLength": true,
	"maxLength": true, "minItems": true, "maxItems": true}

// queryFields lists the fields of query struct t tagged query, those
// of embedded structs in their place.
func queryFields(t reflect.Type) []Field {
	var out []Field
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Tag.Get("query") == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, queryFields(f.Type)...)
			continue
		}
		if f.Tag.Get("query") == "" {
			panic(fmt.Sprintf("openapi: query field %s.%s has no query tag", t.Name(), f.Name))
		}
		out = append(out, Field{f, t.Name()})
	}
	return out
}

// readDocs reads the doc comments of the exported types and struct
// fields of the Go package in dir, as one line of text each.
func readDocs(dir string) (map[string]string, error) {
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, sp := range gd.Specs {
				ts := sp.(*ast.TypeSpec)
				cg := ts.Doc
				if cg == nil && len(gd.Specs) == 1 {
					cg = gd.Doc
				}
				if text := docText(cg); text != "" {
					out[ts.Name.Name] = text
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				for _, fl := range st.Fields.List {
					text := docText(fl.Doc)
					if c := docText(fl.Comment); c != "" {
						text = strings.TrimSpace(text + " " + c)
					}
					if text == "" || len(fl.Names) != 1 {
						// A comment over several fields names them;
						// it is not one field's description.
						continue
					}
					out[ts.Name.Name+"."+fl.Names[0].Name] = text
				}
			}
		}
	}
	return out, nil
}

func docText(cg *ast.CommentGroup) string {
	if cg == nil {
		return ""
	}
	return strings.Join(strings.Fields(cg.Text()), " ")
}

// prose are the keys whose generated values the overlay may replace.
var prose = map[string]bool{"description": true, "summary": true}

// checkOverlay refuses an overlay that describes what the code does not
// have: an operation of no route, a schema of no type, a property of no
// field.
func checkOverlay(overlay, gen map[string]any) error {
	paths, _ := overlay["paths"].(map[string]any)
	genPaths := gen["paths"].(map[string]any)
	for p, item := range paths {
		gi, _ := genPaths[p].(map[string]any)
		if gi == nil {
			return fmt.Errorf("openapi: the overlay describes path %s, which no route has", p)
		}
		for m, o := range item.(map[string]any) {
			if m == "parameters" {
				continue
			}
			gop, _ := gi[m].(map[string]any)
			if gop == nil {
				return fmt.Errorf("openapi: the overlay describes %s %s, which no route has", strings.ToUpper(m), p)
			}
			if err := checkOpOverlay(o.(map[string]any), gop); err != nil {
				return fmt.Errorf("openapi: overlay of %s %s: %w", strings.ToUpper(m), p, err)
			}
		}
	}
	comps, _ := overlay["components"].(map[string]any)
	schemas, _ := comps["schemas"].(map[string]any)
	genSchemas := gen["components"].(map[string]any)["schemas"].(map[string]any)
	for name, s := range schemas {
		gs, _ := genSchemas[name].(map[string]any)
		if gs == nil {
			return fmt.Errorf("openapi: the overlay describes schema %s, which no route's type reaches", name)
		}
		props, _ := s.(map[string]any)["properties"].(map[string]any)
		gprops, _ := gs["properties"].(map[string]any)
		for p := range props {
			if gprops[p] == nil {
				return fmt.Errorf("openapi: the overlay describes %s.%s, which is no field of type %s", name, p, name)
			}
		}
	}
	return nil
}

// checkOpOverlay refuses an overlay of an operation that declares a
// success answer, or a content type of one or of the request body, that
// the route's types do not.
func checkOpOverlay(o, gen map[string]any) error {
	rs, _ := o["responses"].(map[string]any)
	grs, _ := gen["responses"].(map[string]any)
	for code, r := range rs {
		if code[0] < '1' || code[0] > '3' {
			continue // errors are the overlay's to describe
		}
		gr, _ := grs[code].(map[string]any)
		if gr == nil {
			return fmt.Errorf("answer %s is not one the route declares", code)
		}
		if err := sameContent(r, gr); err != nil {
			return fmt.Errorf("answer %s: %w", code, err)
		}
	}
	if rb, ok := o["requestBody"]; ok {
		grb, _ := gen["requestBody"].(map[string]any)
		if grb == nil {
			return fmt.Errorf("a request body the route does not declare")
		}
		if err := sameContent(rb, grb); err != nil {
			return fmt.Errorf("request body: %w", err)
		}
	}
	return nil
}

func sameContent(o any, gen map[string]any) error {
	c, _ := o.(map[string]any)["content"].(map[string]any)
	gc, _ := gen["content"].(map[string]any)
	for ct := range c {
		if gc[ct] == nil {
			return fmt.Errorf("content type %s is not one the route declares", ct)
		}
	}
	return nil
}

// structural are the keys of a schema its Go type decides.
var structural = map[string]bool{"type": true, "properties": true, "items": true, "additionalProperties": true,
	"$ref": true, "allOf": true, "oneOf": true, "anyOf": true, "required": true}

// merge adds overlay into dst. Maps merge key by key; a leaf that both
// have must be equal, or prose; parameter lists merge by name and place.
func (m merger) merge(dst, overlay map[string]any, at string) error {
	for k, ov := range overlay {
		here := at + "/" + k
		dv, ok := dst[k]
		if !ok {
			if strings.HasPrefix(here, "/components/schemas/") && structural[k] {
				return fmt.Errorf("openapi: overlay %s: the shape of a schema is its Go type's, not the overlay's", here)
			}
			dst[k] = ov
			continue
		}
		switch o := ov.(type) {
		case map[string]any:
			d, ok := dv.(map[string]any)
			if !ok {
				return fmt.Errorf("openapi: overlay %s: an object where the code has %v", here, dv)
			}
			if err := m.merge(d, o, here); err != nil {
				return err
			}
		case []any:
			if k == "parameters" {
				d, _ := dv.([]any)
				merged, err := m.mergeParams(d, o, here)
				if err != nil {
					return err
				}
				dst[k] = merged
				continue
			}
			if !reflect.DeepEqual(dv, ov) {
				return fmt.Errorf("openapi: overlay %s = %v contradicts the code's %v", here, ov, dv)
			}
		default:
			if prose[k] {
				dst[k] = ov
				continue
			}
			if !reflect.DeepEqual(dv, ov) {
				return fmt.Errorf("openapi: overlay %s = %v contradicts the code's %v", here, ov, dv)
			}
		}
	}
	return nil
}

// mergeParams appends the overlay's parameters to the generated path
// parameters; an overlay entry naming the same (name, in), inline or by
// a $ref to a component parameter, takes the generated one's place.
func (m merger) mergeParams(gen, overlay []any, at string) ([]any, error) {
	out := slices.Clone(gen)
	for _, p := range overlay {
		pm, _ := p.(map[string]any)
		key := paramKey(pm, m.params)
		i := slices.IndexFunc(out, func(q any) bool { return paramKey(q.(map[string]any), m.params) == key })
		if i < 0 || key == "" {
			if strings.HasPrefix(key, "query ") {
				return nil, fmt.Errorf("openapi: overlay %s: query parameter %s is no field of the route's query type", at, key)
			}
			if strings.HasPrefix(key, "path ") {
				return nil, fmt.Errorf("openapi: overlay %s: path parameter %s is not in the route's pattern", at, key)
			}
			out = append(out, p)
			continue
		}
		if reflect.DeepEqual(out[i], p) {
			continue
		}
		if _, isRef := pm["$ref"]; isRef {
			if !strings.HasPrefix(key, "path ") {
				return nil, fmt.Errorf("openapi: overlay %s: %s by $ref would hide the code's parameter", at, key)
			}
			out[i] = p // a path parameter's shared description
			continue
		}
		merged := maps.Clone(out[i].(map[string]any))
		if err := m.merge(merged, pm, at+"/"+key); err != nil {
			return nil, err
		}
		out[i] = merged
	}
	return out, nil
}

// merger merges an overlay; params maps "#/components/parameters/X"
// to the "in name" of the overlay's parameter X.
type merger struct{ params map[string]string }

// paramKey is "in name" of parameter p, through params for a $ref.
func paramKey(p map[string]any, params map[string]string) string {
	if r, ok := p["$ref"].(string); ok {
		return params[r]
	}
	name, _ := p["name"].(string)
	in, _ := p["in"].(string)
	return in + " " + name
}

// finish checks the merged document: every operation has an id and a
// summary, every operation id is unique.
func finish(doc map[string]any) error {
	ids := map[string]string{}
	paths := doc["paths"].(map[string]any)
	keys := make([]string, 0, len(paths))
	for p := range paths {
		keys = append(keys, p)
	}
	sort.Strings(keys)
	for _, p := range keys {
		for m, o := range paths[p].(map[string]any) {
			if m == "parameters" {
				continue
			}
			op := o.(map[string]any)
			id, _ := op["operationId"].(string)
			if id == "" || op["summary"] == nil {
				return fmt.Errorf("openapi: %s %s has no operationId or summary: add them to the overlay", strings.ToUpper(m), p)
			}
			if prev, dup := ids[id]; dup {
				return fmt.Errorf("openapi: operationId %s of both %s and %s %s", id, prev, m, p)
			}
			ids[id] = m + " " + p
		}
	}
	return nil
}
