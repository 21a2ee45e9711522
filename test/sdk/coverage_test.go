package sdk

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/testenv"
)

// notForSDKs are the operations of api/openapi.json neither SDK calls, each
// with its reason. Every other operation must be called by each SDK's
// suite (checkCoverage): a route added to the API without an SDK call
// fails both suites until the SDKs call it or it is named here.
var notForSDKs = map[string]string{
	"GET /console/{path}": "the web console's pages and assets, for a browser",
	"POST /v1/console/codes": "mints a one-time sign-in code for the web console, which `berth console` opens " +
		"in a browser; a program holds a key already and has no use for a browser session",
	"POST /v1/console/session": "the console's browser trades its code for a key; it refuses what a browser " +
		"marks cross-origin and is no API for programs",
	"GET /v1/mcp":    "the Model Context Protocol over streamable HTTP: MCP clients speak it (test/mcp runs them)",
	"POST /v1/mcp":   "as GET /v1/mcp",
	"DELETE /v1/mcp": "as GET /v1/mcp",
}

// operation is one method and path template of the spec.
type operation struct {
	key    string // "METHOD /path/{param}"
	method string
	re     *regexp.Regexp
	params int
}

// specOperations reads api/openapi.json's operations. A path parameter
// matches one segment, except a last one named path, which matches the
// rest (the port proxy's).
func specOperations(t *testing.T) []operation {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "api", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	var ops []operation
	for path, item := range spec.Paths {
		for m := range item {
			method := strings.ToUpper(m)
			switch method {
			case "GET", "PUT", "POST", "DELETE", "PATCH", "HEAD":
			default:
				continue // parameters, summary, ...
			}
			n := 0
			var sb strings.Builder
			rest := path
			for {
				i := strings.IndexByte(rest, '{')
				if i < 0 {
					sb.WriteString(regexp.QuoteMeta(rest))
					break
				}
				j := strings.IndexByte(rest[i:], '}') + i
				sb.WriteString(regexp.QuoteMeta(rest[:i]))
				if rest[i:j+1] == "{path}" && j+1 == len(rest) {
					sb.WriteString(`.*`)
				} else {
					sb.WriteString(`[^/]+`)
				}
				n++
				rest = rest[j+1:]
			}
			ops = append(ops, operation{key: method + " " + path, method: method,
				re: regexp.MustCompile("^" + sb.String() + "$"), params: n})
		}
	}
	if len(ops) < 50 {
		t.Fatalf("api/openapi.json has %d operations: not the spec", len(ops))
	}
	return ops
}

// match is the operation a request (method, path without its query) is:
// of those whose template matches, the one with the fewest parameters (a
// literal segment wins over a parameter).
func match(ops []operation, method, path string) string {
	best := -1
	for i, op := range ops {
		if op.method == method && op.re.MatchString(path) && (best < 0 || op.params < ops[best].params) {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return ops[best].key
}

// checkCoverage fails the test for each operation of the spec that no
// request of the suite's log ("METHOD /path" a line, written by the suite's
// own recorder: sdk/python/tests/conftest.py, sdk/typescript/tests/
// helpers.mjs) matched, unless notForSDKs names it; and for a name in
// notForSDKs the spec no longer has.
func checkCoverage(t *testing.T, sdk, log string) {
	t.Helper()
	ops := specOperations(t)
	f, err := os.Open(log)
	if err != nil {
		t.Fatalf("%s suite's request log: %v", sdk, err)
	}
	defer f.Close()
	called := map[string]bool{}
	requests := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		method, path, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		requests++
		if k := match(ops, method, path); k != "" {
			called[k] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var missing []string
	known := map[string]bool{}
	for _, op := range ops {
		known[op.key] = true
		if _, excluded := notForSDKs[op.key]; !called[op.key] && !excluded {
			missing = append(missing, op.key)
		}
	}
	for k := range notForSDKs {
		if !known[k] {
			missing = append(missing, fmt.Sprintf("%s (in notForSDKs but not in the spec)", k))
		}
	}
	sort.Strings(missing)
	for _, k := range missing {
		t.Errorf("the %s SDK's suite calls no %s: add the call to the SDK and a test of it, or name the operation in notForSDKs with its reason", sdk, k)
	}
	t.Logf("%s SDK: %d of %d operations called (%d requests), %d not for SDKs", sdk, len(called), len(ops), requests, len(notForSDKs))
}

// TestOperationMatch: requests map to the spec's operations as the
// coverage check needs (literal segments over parameters, the port
// proxy's rest of path).
func TestOperationMatch(t *testing.T) {
	ops := specOperations(t)
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/v1/sandboxes/sb-1", "GET /v1/sandboxes/{id}"},
		{"GET", "/v1/sandboxes/sb-1/files/stat", "GET /v1/sandboxes/{id}/files/stat"},
		{"POST", "/v1/templates/import", "POST /v1/templates/import"},
		{"POST", "/v1/secrets/rotate-key", "POST /v1/secrets/rotate-key"},
		{"PUT", "/v1/secrets/rotate-key", "PUT /v1/secrets/{name}"},
		{"GET", "/v1/sandboxes/sb-1/ports/8000/", "GET /v1/sandboxes/{id}/ports/{port}/{path}"},
		{"GET", "/v1/sandboxes/sb-1/ports/8000/a/b.html", "GET /v1/sandboxes/{id}/ports/{port}/{path}"},
		{"GET", "/v1/sandboxes/sb-1/processes/p1/ws", "GET /v1/sandboxes/{id}/processes/{pid}/ws"},
		{"PATCH", "/v1/sandboxes/sb-1", ""},
		{"GET", "/v1/nothing", ""},
	} {
		if got := match(ops, tc.method, tc.path); got != tc.want {
			t.Errorf("%s %s: got %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}
