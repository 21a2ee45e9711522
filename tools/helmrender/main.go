// Command helmrender renders a Helm chart with its default values, as
// `helm template` does, and prints the manifests. It lives in its own
// module so helm's dependencies never enter berth's go.mod;
// scripts/check-chart.sh compares its output with deploy/kubernetes.
package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: helmrender CHART_DIR RELEASE NAMESPACE")
		os.Exit(2)
	}
	ch, err := loader.Load(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "helmrender:", err)
		os.Exit(1)
	}
	vals, err := chartutil.ToRenderValues(ch, map[string]any{},
		chartutil.ReleaseOptions{Name: os.Args[2], Namespace: os.Args[3], IsInstall: true, Revision: 1},
		chartutil.DefaultCapabilities)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helmrender:", err)
		os.Exit(1)
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helmrender:", err)
		os.Exit(1)
	}
	names := make([]string, 0, len(out))
	for name := range out {
		if strings.HasSuffix(name, ".yaml") && strings.TrimSpace(out[name]) != "" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Printf("---\n# Source: %s\n%s\n", name, strings.TrimSpace(out[name]))
	}
}
