package kubeenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// NetworkPolicy is a running NetworkPolicy enforcer of a cluster's real
// node: sigs.k8s.io/kube-network-policies as a host process
// (tools/k8s/netpol, built by scripts/k8s-netpol-tools.sh). It polices
// only the node's pods that a NetworkPolicy selects (its nft sets hold
// their addresses), in a table and an nfqueue of this cluster's own, so
// two clusters on one machine never meet.
type NetworkPolicy struct {
	// Table is its nft table (inet), berth-k8s-<id>-np: under the prefix
	// testenv's leak sweep looks for.
	Table string
	// Queue is its nfqueue number.
	Queue int
	proc  *proc
}

// FindNetworkPolicyBinary locates kube-network-policies: in
// $BERTH_NETPOL_BIN if set, else in the dir named by <cache>/NETPOL.
func FindNetworkPolicyBinary() (string, error) {
	dir := os.Getenv("BERTH_NETPOL_BIN")
	if dir == "" {
		root := os.Getenv("BERTH_K8S_CACHE")
		if root == "" {
			root = cacheRoot
		}
		b, err := os.ReadFile(filepath.Join(root, "NETPOL"))
		if err != nil {
			return "", fmt.Errorf("kubeenv: no NetworkPolicy enforcer (%v): build it with scripts/k8s-netpol-tools.sh "+
				"(make test-k8s runs it)", err)
		}
		dir = strings.TrimSpace(string(b))
	}
	p := filepath.Join(dir, "kube-network-policies")
	if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("kubeenv: %s is missing or not executable: rebuild with scripts/k8s-netpol-tools.sh", p)
	}
	return p, nil
}

// StartNetworkPolicy runs the enforcer for c's node (Options.Node) and
// waits until its table is loaded. It is stopped by pid and its table
// deleted in t.Cleanup (before the cluster's own cleanup).
func StartNetworkPolicy(t testing.TB, c *Cluster) *NetworkPolicy {
	t.Helper()
	if c.node == nil {
		t.Fatal("kubeenv: a NetworkPolicy enforcer needs the real node (Options.Node)")
	}
	bin, err := FindNetworkPolicyBinary()
	if err != nil {
		t.Fatal(err)
	}
	id, err := strconv.ParseUint(c.ID, 16, 32)
	must(t, err)
	np := &NetworkPolicy{Table: "berth-k8s-" + c.ID + "-np", Queue: 1000 + int(id%60000)}
	kc := c.componentKubeconfig(t, "netpol", "berth-test-netpol", "system:masters")
	np.proc, err = start(filepath.Join(c.Dir, "logs"), "kube-network-policies", bin,
		"--kubeconfig="+kc, "--hostname-override="+c.NodeName,
		"--nftable-name="+np.Table, "--nfqueue-id="+strconv.Itoa(np.Queue), "--v=2")
	must(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- kube-network-policies log (last 40 lines) ---\n%s", np.proc.tail(40))
		}
		np.proc.stop(10 * time.Second)
		if err := deleteTable(np.Table); err != nil {
			t.Errorf("kubeenv: delete nft table %s: %v", np.Table, err)
		}
	})
	if err := waitFor(60*time.Second, "nft table "+np.Table, func() (bool, error) {
		return np.Loaded(), nil
	}, np.proc); err != nil {
		fatalf(t, []*proc{np.proc}, "kubeenv: kube-network-policies: %v", err)
	}
	return np
}

// Loaded reports whether the enforcer's table is in the kernel.
func (np *NetworkPolicy) Loaded() bool {
	conn, err := nftables.New()
	if err != nil {
		return false
	}
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false
	}
	for _, tb := range tables {
		if tb.Name == np.Table {
			return true
		}
	}
	return false
}

// Running reports whether the enforcer process still runs.
func (np *NetworkPolicy) Running() bool {
	done, _ := np.proc.exited()
	return !done
}

// Log is the end of the enforcer's log.
func (np *NetworkPolicy) Log(lines int) string { return np.proc.tail(lines) }

func deleteTable(name string) error {
	conn, err := nftables.New()
	if err != nil {
		return err
	}
	conn.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: name})
	if err := conn.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}
