package openapi

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

type inner struct {
	B int64 `json:"b,omitempty"`
	A bool  `json:"a"`
}

type outer struct {
	Z    string            `json:"z"`
	Skip string            `json:"-"`
	When time.Time         `json:"when"`
	Raw  []byte            `json:"raw,omitempty"`
	Map  map[string]uint16 `json:"map,omitempty"`
	In   *inner            `json:"in,omitempty"`
	inner
}

// TestGenerateSchemas: a struct's schema is its JSON object as
// encoding/json writes it — properties in field order, an embedded
// struct's fields in its place, "-" left out, omitempty fields not
// required — and the document is byte-stable.
func TestGenerateSchemas(t *testing.T) {
	ops := []Operation{{Method: "POST", Path: "/v1/o/{id}", Body: outer{}, Answers: []Answer{{Status: 200, Body: NDJSON{Of: inner{}}}}}}
	overlay := `{"paths":{"/v1/o/{id}":{"post":{"operationId":"o","summary":"O",
		"parameters":[{"name":"q","in":"query","schema":{"type":"string"}}]},
		"parameters":[{"name":"id","in":"path","required":true,"description":"Its id.","schema":{"type":"string"}}]}}}`
	doc, err := Generate(ops, Config{Overlay: []byte(overlay)})
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Generate(ops, Config{Overlay: []byte(overlay)})
	if string(doc) != string(again) {
		t.Fatal("two generations differ")
	}
	var d struct {
		Paths map[string]struct {
			Parameters []map[string]any `json:"parameters"`
		} `json:"paths"`
		Components struct {
			Schemas map[string]struct {
				Properties map[string]map[string]any `json:"properties"`
				Required   []string                  `json:"required"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	o := d.Components.Schemas["outer"]
	if strings.Join(o.Required, ",") != "z,when,a" {
		t.Errorf("required = %v", o.Required)
	}
	s := string(doc)
	order := []string{`"z": {`, `"when": {`, `"raw": {`, `"map": {`, `"in": {`, `"b": {`, `"a": {`}
	last := 0
	for _, k := range order {
		i := strings.Index(s[last:], k)
		if i < 0 {
			t.Fatalf("%s missing or out of Go field order in %s", k, s)
		}
		last += i
	}
	if o.Properties["when"]["format"] != "date-time" || o.Properties["raw"]["format"] != "byte" ||
		o.Properties["in"]["$ref"] != "#/components/schemas/inner" || o.Properties["Skip"] != nil {
		t.Errorf("properties = %v", o.Properties)
	}
	ps := d.Paths["/v1/o/{id}"].Parameters
	if len(ps) != 1 || ps[0]["description"] != "Its id." {
		t.Errorf("path parameters = %v: the overlay's id should replace the generated one", ps)
	}
	if !strings.Contains(s, `"application/x-ndjson"`) {
		t.Error("the NDJSON answer has no application/x-ndjson content")
	}
}
