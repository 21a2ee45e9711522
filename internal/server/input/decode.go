// Package input is the API edge's reading of request bodies: strict JSON
// (a bounded body, one object — never null —, no key twice at any depth,
// compared the way encoding/json matches fields, no unknown fields, no
// trailing data) and the rule set of every request type the edge can
// judge alone (Validate), which the access layer's gate applies
// (access.Check): Decode hands it every body it decodes. Pure functions
// of the bytes and the request; the server's handlers call them before
// anything acts.
//
// CheckPathValues checks the {id} and {name} path values. FuzzCheckJSON
// lives here; FuzzDecodeRequests (decode, then the api→engine conversion
// and the spec's own validation) lives beside the conversion, in
// internal/server/convert.
package input

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"unicode"

	"github.com/berth-sh/berth/internal/access"
	"github.com/berth-sh/berth/internal/errdefs"
)

// maxJSONDepth bounds the nesting of a request body. The deepest request
// type nests four levels; the bound keeps the checker's recursion small.
const maxJSONDepth = 32

// MaxBody bounds every JSON request body but apply's.
const MaxBody = 1 << 20

// Decode reads a JSON body strictly: bounded size, a JSON object (not
// null), no duplicate key at any depth, no unknown fields, no trailing
// data; then hands it to the access layer's gate (access.Check), which
// validates it with its type's one rule set (Validate, below) as it
// validates every door's request: no handler validates a body itself.
func Decode(r *http.Request, v any) error {
	return decodeLimit(r, v, MaxBody)
}

// DecodeLarge is Decode for the one body that carries files (apply).
func DecodeLarge(r *http.Request, v any) error {
	return decodeLimit(r, v, 1<<30+4<<20)
}

func decodeLimit(r *http.Request, v any, limit int64) error {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errdefs.TooLarge("request body exceeds %d bytes", limit)
		}
		return errdefs.Invalid("reading the request body: %v", err)
	}
	return DecodeBytes(body, v)
}

// DecodeBytes is Decode for a body already read (also the first message
// of the WebSocket exec).
func DecodeBytes(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return errdefs.Invalid("request body is empty; expected JSON")
	}
	if err := checkJSON(body, reflect.TypeOf(v)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errdefs.Invalid("bad JSON body: %v", err)
	}
	return access.Check(Request(v))
}

// Request is a decoded body as the gate validates it: its Validate is
// the body type's one rule set (the package's Validate).
func Request(v any) access.Validator { return request{v} }

type request struct{ v any }

func (r request) Validate() error { return Validate(r.v) }

// checkJSON is a token-level pass over body before it is decoded into a
// value of type t (a pointer to a request struct): body must be one JSON
// value, an object, nested at most maxJSONDepth deep, with no key twice in
// one object. encoding/json would keep the last of duplicate keys, and
// matches struct fields case-insensitively, so within a struct "name" and
// "NAME" are the same key too; within a map (env, labels) keys are exact.
// A second reader of the same bytes (a proxy, an audit log) must not see
// a different request than berth does.
func checkJSON(body []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return badJSON(err)
	}
	if tok == nil {
		return errdefs.Invalid("request body is null; expected a JSON object")
	}
	if t != nil && t.Kind() == reflect.Struct && tok != json.Delim('{') {
		return errdefs.Invalid("request body must be a JSON object")
	}
	if err := checkValue(dec, tok, t, 1, ""); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errdefs.Invalid("bad JSON body: trailing data after the object")
	}
	return nil
}

func badJSON(err error) error {
	if err == io.EOF {
		return errdefs.Invalid("bad JSON body: unexpected end")
	}
	return errdefs.Invalid("bad JSON body: %v", err)
}

// checkValue checks the value that starts with tok, of Go type t (nil:
// unknown, e.g. a field the decoder will refuse), at depth, under path.
func checkValue(dec *json.Decoder, tok json.Token, t reflect.Type, depth int, path string) error {
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar
	}
	if depth > maxJSONDepth {
		return errdefs.Invalid("bad JSON body: nested deeper than %d", maxJSONDepth)
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch d {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return badJSON(err)
			}
			if err := checkValue(dec, tok, elem, depth+1, path+"[]"); err != nil {
				return err
			}
		}
	case '{':
		var fields map[string]reflect.Type
		isStruct := t != nil && t.Kind() == reflect.Struct
		if isStruct {
			fields = jsonFieldsOf(t)
		}
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return badJSON(err)
			}
			key, _ := tok.(string)
			id := key
			var vt reflect.Type
			if isStruct {
				id = foldKey(key)
				vt = fields[id]
			} else if t != nil && t.Kind() == reflect.Map {
				vt = t.Elem()
			}
			if seen[id] {
				return errdefs.Invalid("bad JSON body: duplicate key %q in %s", key, orTop(path))
			}
			seen[id] = true
			tok, err = dec.Token()
			if err != nil {
				return badJSON(err)
			}
			if err := checkValue(dec, tok, vt, depth+1, path+"."+key); err != nil {
				return err
			}
		}
	default:
		return errdefs.Invalid("bad JSON body: unexpected %v", d)
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return badJSON(err)
	}
	return nil
}

func orTop(path string) string {
	if path == "" {
		return "the body"
	}
	return strings.TrimPrefix(path, ".")
}

// foldKey folds a key the way encoding/json matches struct field names
// (bytes.EqualFold): each rune to the smallest of its simple-fold orbit.
func foldKey(k string) string {
	return strings.Map(func(r rune) rune {
		min := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < min {
				min = f
			}
		}
		return min
	}, k)
}

var fieldCache sync.Map // reflect.Type -> map[string]reflect.Type

// jsonFieldsOf maps the folded JSON names of struct t's fields (those of
// embedded structs promoted, as encoding/json does) to their types.
func jsonFieldsOf(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" {
				ft := f.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct {
					walk(ft)
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if _, dup := m[foldKey(name)]; !dup {
				m[foldKey(name)] = f.Type
			}
		}
	}
	walk(t)
	fieldCache.Store(t, m)
	return m
}
