package interp

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// mplDir is the package's tests' matplotlib cache (TestMain removes it).
var mplDir string

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "berth-interp-mpl-")
	if err != nil {
		panic(err)
	}
	mplDir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// chartOf runs the figure code with the host's matplotlib (Agg) and
// berth_charts.chart, and returns the chart's JSON as decoded.
func chartOf(t *testing.T, figure string) map[string]any {
	t.Helper()
	out := chartOfRaw(t, figure)
	var c map[string]any
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	return c
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func field(c map[string]any, path ...any) any {
	var v any = c
	for _, p := range path {
		switch k := p.(type) {
		case string:
			v = v.(map[string]any)[k]
		case int:
			v = v.([]any)[k]
		}
	}
	return v
}

func TestChartExtraction(t *testing.T) {
	for _, tc := range []struct {
		name, figure string
		want         map[string]any // path (dotted) to value
	}{
		{"bar", "plt.bar(['u', 'v', 'w'], [3, 1, 2], label='Sold')\nplt.xlabel('Shop')\nplt.ylabel('Count [items]')\nplt.title('Sales')",
			map[string]any{"type": "bar", "title": "Sales", "x_label": "Shop", "y_unit": "items", "x_unit": nil,
				"elements": []any{
					map[string]any{"label": "u", "group": "Sold", "value": 3.0},
					map[string]any{"label": "v", "group": "Sold", "value": 1.0},
					map[string]any{"label": "w", "group": "Sold", "value": 2.0}}}},
		// Horizontal bars with equal values: the categories are still x.
		{"barh", "plt.barh(['p', 'q'], [5, 5])\nplt.xlabel('Amount')\nplt.ylabel('Kind')",
			map[string]any{"type": "bar", "x_label": "Kind", "y_label": "Amount", "title": nil,
				"elements": []any{
					map[string]any{"label": "p", "group": "Group 0", "value": 5.0},
					map[string]any{"label": "q", "group": "Group 0", "value": 5.0}}}},
		{"pie", "plt.pie([75, 25], labels=['big', 'small'], autopct='%1.0f%%')\nplt.title('Share')",
			map[string]any{"type": "pie", "title": "Share",
				"elements": []any{
					map[string]any{"label": "big", "angle": 270.0, "radius": 1.0},
					map[string]any{"label": "small", "angle": 90.0, "radius": 1.0}}}},
		{"box", "plt.boxplot([[1, 2, 3, 4, 5], [2, 4, 6, 8, 10, 40]], labels=['a', 'b'], patch_artist=True)",
			map[string]any{"type": "box_and_whisker",
				"elements": []any{
					map[string]any{"label": "a", "min": 1.0, "first_quartile": 2.0, "median": 3.0, "third_quartile": 4.0, "max": 5.0, "outliers": []any{}},
					map[string]any{"label": "b", "min": 2.0, "first_quartile": 4.5, "median": 7.0, "third_quartile": 9.5, "max": 10.0, "outliers": []any{40.0}}}}},
		{"unknown", "plt.gca().add_artist(plt.Circle((0, 0), 1))\nplt.title('Round')",
			map[string]any{"type": "unknown", "title": "Round", "elements": []any{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := chartOf(t, tc.figure)
			for k, want := range tc.want {
				if got := c[k]; !reflect.DeepEqual(got, want) {
					t.Errorf("%s: %#v, want %#v", k, got, want)
				}
			}
		})
	}
}

func TestChartLineAndScales(t *testing.T) {
	c := chartOf(t, "days = [datetime.date(2024, 1, 1) + datetime.timedelta(days=i) for i in range(5)]\n"+
		"plt.plot(days, [1, 2, 3, 2, 1], label='up')\nplt.plot(days, [0, 0, 1, 0, 0])\nplt.xlabel('Day (d)')\nplt.grid(True)")
	if c["type"] != "line" || c["x_scale"] != "datetime" || c["y_scale"] != "linear" || c["x_unit"] != "d" {
		t.Fatalf("line: %v", c)
	}
	if field(c, "elements", 0, "label") != "up" || field(c, "elements", 1, "label") != "Line 1" {
		t.Errorf("line labels: %v", c["elements"])
	}
	if p := field(c, "elements", 0, "points", 0); !reflect.DeepEqual(p, []any{"2024-01-01", 1.0}) {
		t.Errorf("first point: %#v", p)
	}
	for _, tick := range c["x_ticks"].([]any) {
		if _, ok := tick.(string); !ok {
			t.Errorf("a datetime tick that is not a string: %#v", tick)
		}
	}
	cat := chartOf(t, "plt.plot([1, 2, 3], ['lo', 'mid', 'hi'])")
	if cat["y_scale"] != "categorical" || cat["x_scale"] != "linear" || !reflect.DeepEqual(cat["y_tick_labels"], []any{"lo", "mid", "hi"}) {
		t.Errorf("categorical: %v", cat)
	}
	lg := chartOf(t, "plt.plot([1, 2, 3], [10, 100, 1000])\nplt.yscale('log')")
	if lg["y_scale"] != "log" {
		t.Errorf("log: %v", lg["y_scale"])
	}
	sc := chartOf(t, "plt.scatter([1, 2], [3, 4], label='pts')")
	if sc["type"] != "scatter" || !reflect.DeepEqual(field(sc, "elements", 0), map[string]any{"label": "pts", "points": []any{[]any{1.0, 3.0}, []any{2.0, 4.0}}}) {
		t.Errorf("scatter: %v", sc)
	}
	sup := chartOf(t, "fig, axs = plt.subplots(1, 2)\nfig.suptitle('Both')\naxs[0].plot([1, 2], [2, 1])\naxs[1].scatter([1], [1])")
	if sup["type"] != "superchart" || sup["title"] != "Both" || field(sup, "elements", 0, "type") != "line" || field(sup, "elements", 1, "type") != "scatter" {
		t.Errorf("superchart: %v", sup)
	}
	// A figure with nothing drawn has no chart.
	cmdOut := chartOfRaw(t, "plt.figure()")
	if cmdOut != "null" {
		t.Errorf("a blank figure: %s", cmdOut)
	}
}

// chartOfRaw is chartOf's JSON as printed.
func chartOfRaw(t *testing.T, figure string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "berth_charts.py"), chartsPy, 0o644); err != nil {
		t.Fatal(err)
	}
	prog := "import json, sys, datetime\nimport matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n" +
		"sys.path.insert(0, " + jsonString(dir) + ")\nimport berth_charts\n" + figure +
		"\nprint(json.dumps(berth_charts.chart(plt.gcf())))\n"
	cmd := exec.Command("/usr/bin/python3", "-c", prog)
	// One matplotlib cache for the package's tests: a fresh one costs
	// seconds of font scanning per figure.
	cmd.Env = append(os.Environ(), "MPLCONFIGDIR="+mplDir)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("python (scripts/install-deps.sh installs python3-matplotlib): %v\n%s", err, stderr)
	}
	return strings.TrimSpace(string(out))
}
