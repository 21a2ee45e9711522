package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestQueryParamsDeclared: every query parameter a handler of
// internal/server reads (r.URL.Query().Get("x"), q.Get("x"), q["x"],
// and the packages' helpers that take a name) is a field of some route's
// Query type, so api/openapi.json documents it. It reads the source: the
// handlers parse their queries by hand, each with its own rules.
func TestQueryParamsDeclared(t *testing.T) {
	declared := map[string]bool{}
	var walk func(rt reflect.Type)
	walk = func(rt reflect.Type) {
		for i := range rt.NumField() {
			f := rt.Field(i)
			if name, _, _ := strings.Cut(f.Tag.Get("query"), ","); name != "" {
				declared[name] = true
			} else if f.Anonymous {
				walk(f.Type)
			}
		}
	}
	for _, rt := range Routes() {
		if rt.Query != nil {
			walk(reflect.TypeOf(rt.Query))
		}
	}
	// Read by the undocumented host-routed port proxy (a browser's port
	// token, auth.PortTokenParam).
	undocumentedQuery := []string{"berth_port_token"}
	helpers := map[string]bool{"boolParam": true, "boolQuery": true, "pathParamNamed": true}
	read := map[string]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		lit := func(e ast.Expr) string {
			if bl, ok := e.(*ast.BasicLit); ok && bl.Kind == token.STRING {
				s, _ := strconv.Unquote(bl.Value)
				return s
			}
			return ""
		}
		isQuery := func(e ast.Expr) bool {
			switch x := e.(type) {
			case *ast.Ident:
				return x.Name == "q"
			case *ast.CallExpr:
				sel, ok := x.Fun.(*ast.SelectorExpr)
				return ok && sel.Sel.Name == "Query"
			}
			return false
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CallExpr:
				if sel, ok := x.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Get" || sel.Sel.Name == "Has") &&
					isQuery(sel.X) && len(x.Args) == 1 {
					if s := lit(x.Args[0]); s != "" {
						read[s] = path
					}
				}
				if id, ok := x.Fun.(*ast.Ident); ok && helpers[id.Name] && len(x.Args) == 2 {
					if s := lit(x.Args[1]); s != "" {
						read[s] = path
					}
				}
			case *ast.IndexExpr:
				if isQuery(x.X) {
					if s := lit(x.Index); s != "" {
						read[s] = path
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(read) < 15 {
		t.Fatalf("found only %d query parameters read (%v): is the scan blind?", len(read), read)
	}
	for name, path := range read {
		if !declared[name] && !slices.Contains(undocumentedQuery, name) {
			t.Errorf("%s reads query parameter %q, which no route's Query declares", path, name)
		}
	}
}
