// Command kube-network-policies runs sigs.k8s.io/kube-network-policies'
// NetworkPolicy controller (nftables + nfqueue) as a host process of
// berth's test cluster (internal/testenv/kubeenv Options.NetworkPolicy):
// the real enforcer berth's NetworkPolicies are checked against.
//
// Upstream's own main reads only the in-cluster config and listens for
// metrics on :9080; this one takes the cluster's kubeconfig, a node name,
// an nft table name and an nfqueue number of its own (so two clusters on
// one machine never share either), serves no metrics, and stops on
// SIGTERM as on SIGINT, deleting its table. scripts/k8s-netpol-tools.sh
// builds it against a patched copy of the module (see there why).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the cluster's kubeconfig (required)")
	nodeName := flag.String("hostname-override", "", "the node whose pods this enforcer polices (required)")
	table := flag.String("nftable-name", "", "the inet nft table it owns (required)")
	queue := flag.Int("nfqueue-id", 0, "its nfqueue number, 1-65534 (required)")
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" || *nodeName == "" || *table == "" || *queue < 1 || *queue > 65534 {
		fmt.Fprintln(os.Stderr, "kube-network-policies: --kubeconfig, --hostname-override, --nftable-name and --nfqueue-id are required")
		os.Exit(2)
	}
	os.Exit(run(*kubeconfig, *nodeName, *table, *queue))
}

func run(kubeconfig, nodeName, table string, queue int) int {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		klog.Errorf("kubeconfig: %v", err)
		return 1
	}
	rc.UserAgent = "kube-network-policies (berth test cluster)"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		klog.Errorf("client: %v", err)
		return 1
	}
	f := informers.NewSharedInformerFactory(cs, 0)
	c, err := networkpolicy.NewController(cs,
		f.Networking().V1().NetworkPolicies(), f.Core().V1().Namespaces(), f.Core().V1().Pods(),
		nil, nil, nil, nil,
		networkpolicy.Config{
			FailOpen:            false,
			QueueID:             queue,
			NodeName:            nodeName,
			NetfilterBug1766Fix: false, // fixed in kernels 6.12+
			NFTableName:         table,
			NRIdisabled:         true, // containerd 1.6 has no NRI
		})
	if err != nil {
		klog.Errorf("controller: %v", err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	f.Start(ctx.Done())
	select {
	case err := <-done:
		// Run returns early only when it cannot work (its nfqueue taken,
		// the caches never synced): say so and exit non-zero.
		if err == nil {
			err = ctx.Err()
		}
		if ctx.Err() == nil {
			klog.Errorf("controller stopped: %v", err)
			return 1
		}
	case <-ctx.Done():
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	}
	f.Shutdown()
	return 0
}
