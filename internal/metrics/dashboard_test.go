package metrics

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// The dashboard's queries are read with a PromQL tokenizer of our own
// rather than github.com/prometheus/prometheus/promql/parser: that parser
// imports the TSDB (tsdb/chunks and its dependencies) and would upgrade
// x/net, x/text, x/time and klauspost/compress for the whole module. A
// query's metric names are what this test needs, and they are the
// identifiers left once strings, label matchers, ranges, grouping label
// lists, function names, keywords and numbers are skipped.

// queryMetricNames returns the metric names an expression selects.
func queryMetricNames(expr string) []string {
	var names []string
	s := expr
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(s, i)
		case c == '{':
			i = skipBalanced(s, i, '{', '}')
		case c == '[':
			i = skipBalanced(s, i, '[', ']')
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '$':
			// A Grafana variable: $name or ${name}.
			i++
			if i < len(s) && s[i] == '{' {
				i = skipBalanced(s, i, '{', '}')
			} else {
				for i < len(s) && isIdent(s[i], false) {
					i++
				}
			}
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			for i < len(s) && (isIdent(s[i], false) || s[i] == '.') {
				i++
			}
		case isIdent(c, true):
			start := i
			for i < len(s) && isIdent(s[i], false) {
				i++
			}
			word := s[start:i]
			j := i
			for j < len(s) && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n') {
				j++
			}
			next := byte(0)
			if j < len(s) {
				next = s[j]
			}
			switch {
			case grouping[word]:
				if next == '(' { // a list of label names, not a selector
					i = skipBalanced(s, j, '(', ')')
				}
			case word == "offset":
				i = j
				for i < len(s) && (isIdent(s[i], false) || s[i] == '-') {
					i++
				}
			case keywords[strings.ToLower(word)]:
			case next == '(':
				// a function (or aggregation) name
			default:
				names = append(names, word)
			}
		default:
			i++
		}
	}
	return names
}

var grouping = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// keywords are never metric names: binary operators, number words and
// the aggregation operators (which may be followed by a grouping clause
// rather than a parenthesis: sum by (x) (...)).
var keywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "atan2": true, "inf": true, "nan": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true,
	"count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true}

func isIdent(c byte, first bool) bool {
	if c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
		return true
	}
	return !first && c >= '0' && c <= '9'
}

// skipString returns the index past the string literal at s[i].
func skipString(s string, i int) int {
	q := s[i]
	for i++; i < len(s); i++ {
		if s[i] == '\\' && q != '`' {
			i++
			continue
		}
		if s[i] == q {
			return i + 1
		}
	}
	return i
}

// skipBalanced returns the index past the bracket opened at s[i],
// skipping strings and nested brackets.
func skipBalanced(s string, i int, open, close byte) int {
	depth := 0
	for i < len(s) {
		switch c := s[i]; {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(s, i)
			continue
		case c == open:
			depth++
		case c == close:
			depth--
			if depth == 0 {
				return i + 1
			}
		}
		i++
	}
	return i
}

func TestQueryMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`histogram_quantile(0.95, sum by (le, path) (rate(a_bucket{code!="ok", x=~"a{b}"}[$__rate_interval])))`, []string{"a_bucket"}},
		{`sum(rate(b_total[5m])) by (code) / ignoring(code) group_left c`, []string{"b_total", "c"}},
		{`d offset 1h and on(x) e or f unless bool g`, []string{"d", "e", "f", "g"}},
		{`sum without (kind) (h{s="by (x)"}) > 1e3 * 2.5 + Inf`, []string{"h"}},
		{`rate(i[5m:1m]) # j is a comment`, []string{"i"}},
		{`k:recorded:rate5m * ${factor}`, []string{"k:recorded:rate5m"}},
		{"label_replace(l, 'dst', `$1`, \"src\", \"(.*)\")", []string{"l"}},
	} {
		if got := queryMetricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.expr, got, tc.want)
		}
	}
}

// exported is every metric name the daemon's registry exposes (the
// engine's and the API's): one of
// each measure recorded (vectors export no series until used), the
// scrape-time gauges from a full snapshot, histograms as their series.
func exported(t *testing.T) (names map[string]bool, families []string) {
	m := New()
	m.Created("base", "runc", "cold", time.Second)
	m.CreateFailed("not_found")
	m.ExecDone("ok", time.Second)
	m.Resumed("unpause", time.Second)
	m.CleanedUp("user", time.Second)
	m.TeardownFailed(false)
	m.Orphan("dir", true)
	m.PolicyAction("idle", "pause")
	m.WebhookDelivery(true)
	m.Egress("deny")
	m.Watch(func(context.Context) (Snapshot, error) { return fullSnapshot(), nil }, time.Second)
	m.WatchLeases(func() map[string]bool { return map[string]bool{"node": true, "store": false} })
	a := NewAPI(m.Registry())
	a.Requests.WithLabelValues("GET", "200").Inc()
	a.Latency.WithLabelValues("GET").Observe(0.01)
	RegisterAgentRefusals(m.Registry(), func() uint64 { return 0 })
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names = map[string]bool{}
	for _, f := range fams {
		n := f.GetName()
		if f.GetType() == dto.MetricType_HISTOGRAM {
			names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
		} else {
			names[n] = true
		}
		if strings.HasPrefix(n, "berth_") {
			families = append(families, n)
		}
	}
	return names, families
}

// TestDashboardNamesExportedMetrics: deploy/grafana/berth.json parses, and
// every query names only metrics berth exports; every berth measure is on
// the dashboard.
func TestDashboardNamesExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("../../deploy/grafana/berth.json")
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var dash struct {
		Title  string  `json:"title"`
		UID    string  `json:"uid"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("berth.json: %v", err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("berth.json: no title, uid or panels")
	}
	names, families := exported(t)
	used := map[string]bool{}
	queries := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			got := queryMetricNames(tg.Expr)
			if len(got) == 0 {
				t.Errorf("panel %q: query %q names no metric", p.Title, tg.Expr)
			}
			for _, n := range got {
				if !names[n] {
					t.Errorf("panel %q: query %q names %q, which berth does not export", p.Title, tg.Expr, n)
				}
				used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")] = true
			}
		}
	}
	for _, f := range families {
		if !used[f] {
			t.Errorf("%s is on no panel of the dashboard", f)
		}
	}
	t.Logf("%d panels, %d queries, %d berth metrics", len(dash.Panels), queries, len(families))
}
