// Package kubeenv starts a real Kubernetes cluster for tests, on this
// machine and on loopback only: etcd and kube-apiserver (Node,RBAC
// authorization, service-account keys, no controller-manager unless asked),
// and optionally one real node (containerd 1.6 with runc, a CNI bridge with
// no route off the machine, kubelet) and kwok's simulated nodes.
//
// The binaries come from scripts/k8s-tools.sh, which builds them from the
// Go module proxy into a cache outside the clone; Start fails the test,
// naming that script, when they are missing. Everything a cluster makes
// lives under one directory /tmp/berth-k8s-XXXX (a testenv harness prefix,
// so scripts/leakcheck.sh sees what is left of it), one cgroup parent
// /berth-k8s-<hex>, one bridge bk<hex> and network namespaces under the
// containerd state dir; t.Cleanup stops every process by pid and removes
// all of it. See docs/kubernetes.md ("Test cluster").
package kubeenv
