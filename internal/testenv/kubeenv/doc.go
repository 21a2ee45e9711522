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
//
// Start(t, Options) makes a CA and certificates, writes an admin kubeconfig
// and gives namespaces their default ServiceAccount and kube-root-ca.crt by
// hand (CreateNamespace). BuildImage and BusyboxImage pack a dir as a docker
// save tarball, ImportImage puts it in the node's containerd; UserConfig and
// ServiceAccountConfig are clients for RBAC tests; StartKwok adds simulated
// nodes; StartNetworkPolicy runs kube-network-policies as the node's
// NetworkPolicy enforcer (netpol.go: its own nft table and nfqueue number);
// Options.ServiceProxy runs the real kube-proxy in iptables mode, one at a
// time per host under a flock (serviceproxy.go); Options.CSI runs a CSI
// stack with snapshots (csi.go: the test driver kubeenv/csidriver in the
// test process, the external-provisioner, csi-snapshotter and
// snapshot-controller as host processes, StorageClass and
// VolumeSnapshotClass berth-csi).
package kubeenv
