//go:build tools

// Package tools pins the commands scripts/k8s-csi-tools.sh builds.
package tools

import (
	// The CRDs (config/crd) the script copies come from this module.
	_ "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"

	_ "github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"
	_ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter"
	_ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller"
)
