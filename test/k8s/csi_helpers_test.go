package k8s

import (
	"context"
	"strings"
	"testing"
	"time"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/testenv/kubeenv"
)

// sandboxNS is the namespace of every sandbox in these tests.
const sandboxNS = "berth-sandboxes"

// startCSICluster starts a cluster with the CSI stack (checked to leave
// nothing behind), makes sandboxNS and imports the images; it returns the
// cluster and a snapshot.storage.k8s.io client of it.
func startCSICluster(t *testing.T) (*kubeenv.Cluster, snapclient.Interface) {
	t.Helper()
	t0 := time.Now()
	var c *kubeenv.Cluster
	checkGone(t, &c)
	c = kubeenv.Start(t, kubeenv.Options{CSI: true})
	t.Logf("cluster with the CSI stack up in %v", time.Since(t0).Round(time.Millisecond))
	c.CreateNamespace(t, sandboxNS)
	importImages(t, c)
	return c, snapclient.NewForConfigOrDie(c.Config)
}

// shellIn returns a function that runs script with /bin/sh in sandbox id
// through cl and returns its output, failing the test unless it exits 0.
func shellIn(t *testing.T, cl *client.Client) func(id, script string) string {
	return func(id, script string) string {
		t.Helper()
		var out strings.Builder
		ex, err := cl.Exec(context.Background(), id, api.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}, Env: map[string]string{"PATH": "/bin"}}, &out, &out)
		if err != nil || ex.Code != 0 {
			t.Fatalf("%s: exec %q: %v, exit %+v: %s", id, script, err, ex, out.String())
		}
		return out.String()
	}
}

// doctorClean fails the test on any finding of cl's doctor but the host's
// Python packages (kind template: not these tests').
func doctorClean(t *testing.T, cl *client.Client) {
	t.Helper()
	rep, err := cl.Doctor(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Findings {
		if f.Kind != "template" {
			t.Errorf("doctor: %+v", f)
		}
	}
}
