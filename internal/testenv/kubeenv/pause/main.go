// Command pause is the test cluster's pod sandbox image (containerd's
// sandbox_image): it holds the pod's namespaces and exits on SIGTERM or
// SIGINT. Built static and packed as an image by kubeenv, so no registry is
// needed.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
