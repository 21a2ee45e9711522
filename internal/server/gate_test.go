package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// decoders are the strict decoders that hand a body to the access
// layer's gate (access.Check) once decoded.
var decoders = map[string]bool{"Decode": true, "DecodeLarge": true, "DecodeBytes": true}

// TestJSONBodiesGoThroughGate: every route whose request body is a JSON
// request type (In: api.X{}, or openapi.Optional{Body: api.X{}}) is
// served by a handler that reads it with input's strict decoder, which
// hands it to the gate to validate: a handler cannot read a request the
// gate never saw. With TestNoValidationOutsideGate (internal/access),
// which forbids a door's own Validate, the gate is where every REST
// request is validated.
func TestJSONBodiesGoThroughGate(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "routes.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	type route struct{ pattern, field, method string }
	var routes []route
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		var r route
		json := false
		for _, e := range lit.Elts {
			kv, ok := e.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			switch k, _ := kv.Key.(*ast.Ident); {
			case k == nil:
			case k.Name == "Pattern":
				if b, ok := kv.Value.(*ast.BasicLit); ok {
					r.pattern = strings.Trim(b.Value, `"`)
				}
			case k.Name == "In":
				json = apiBody(kv.Value)
			case k.Name == "h":
				// hf(s.<field>.<Method>)
				if c, ok := kv.Value.(*ast.CallExpr); ok && len(c.Args) == 1 {
					if m, ok := c.Args[0].(*ast.SelectorExpr); ok {
						if fld, ok := m.X.(*ast.SelectorExpr); ok {
							r.field, r.method = fld.Sel.Name, m.Sel.Name
						}
					}
				}
			}
		}
		if json && r.pattern != "" {
			routes = append(routes, r)
		}
		return true
	})
	if len(routes) < 20 {
		t.Fatalf("found %d routes with a JSON request type in routes.go, want at least 20: %+v", len(routes), routes)
	}
	decodes := map[string]map[string]bool{} // package dir → handler method → reads its body with input's decoder
	for _, r := range routes {
		if r.field == "" {
			t.Errorf("%s: its handler is not a handlers package's method (hf(s.pkg.Method)): check it by hand here", r.pattern)
			continue
		}
		if decodes[r.field] == nil {
			decodes[r.field] = decodingMethods(t, r.field)
		}
		if !decodes[r.field][r.method] {
			t.Errorf("%s: %s.Handlers.%s does not read its body with input.Decode (which hands it to the gate)", r.pattern, r.field, r.method)
		}
	}
}

// apiBody reports whether an In value is a JSON request type of package
// api: api.X{} or openapi.Optional{Body: api.X{}}.
func apiBody(e ast.Expr) bool {
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return false
	}
	if s, ok := lit.Type.(*ast.SelectorExpr); ok {
		if x, ok := s.X.(*ast.Ident); ok && x.Name == "api" {
			return true
		}
		if x, ok := s.X.(*ast.Ident); ok && x.Name == "openapi" && s.Sel.Name == "Optional" {
			for _, el := range lit.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Body" {
						return apiBody(kv.Value)
					}
				}
			}
		}
	}
	return false
}

// decodingMethods lists the methods of package dir's Handlers that call
// input.Decode, DecodeLarge or DecodeBytes.
func decodingMethods(t *testing.T, dir string) map[string]bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("reading internal/server/%s: %v", dir, err)
	}
	out := map[string]bool{}
	for _, ent := range ents {
		name := ent.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					if s, ok := c.Fun.(*ast.SelectorExpr); ok && decoders[s.Sel.Name] {
						if x, ok := s.X.(*ast.Ident); ok && x.Name == "input" {
							out[fn.Name.Name] = true
						}
					}
				}
				return true
			})
		}
	}
	return out
}
