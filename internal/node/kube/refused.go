package kube

// What a pod cannot do, refused with errdefs.ErrNotSupported and the
// reason, so the API answers with a stable code and a sentence rather
// than a half-done operation. The classes' Caps say the same as data.

import (
	"context"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/network"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
)

func notOnKube(what, why string) error {
	return errdefs.NotSupported("%s is not available on the kubernetes backend: %s", what, why)
}

const (
	whyFreeze     = "Kubernetes cannot freeze a pod's processes in place; pause maps to stop (the pod is deleted, its volumes and identity kept)"
	whyCheckpoint = "Kubernetes has no checkpoint and restore of a pod's processes that berth can drive (the kubelet's checkpoint API is forensic, not restorable)"
)

// Freeze is refused (Caps.Freeze false).
func (b *Backend) Freeze(ctx context.Context, sb *sandbox.Sandbox) error {
	return notOnKube("pause (freeze)", whyFreeze)
}

// Thaw is refused: nothing is ever frozen.
func (b *Backend) Thaw(ctx context.Context, sb *sandbox.Sandbox) error {
	return notOnKube("resume (thaw)", whyFreeze)
}

// Checkpoint is refused; sb keeps running.
func (b *Backend) Checkpoint(ctx context.Context, sb *sandbox.Sandbox) (node.Checkpoint, bool, error) {
	return node.Checkpoint{}, true, notOnKube("hibernate", whyCheckpoint)
}

// Hibernated: never.
func (b *Backend) Hibernated(sb *sandbox.Sandbox) bool { return false }

// Restore is refused.
func (b *Backend) Restore(ctx context.Context, sb *sandbox.Sandbox) error {
	return notOnKube("wake", whyCheckpoint)
}

// CheckRules validates egress rules (berth's own grammar), so that a
// template naming rules is checked the same everywhere.
func (b *Backend) CheckRules(allow []string) error {
	if _, err := network.ParseRules(allow); err != nil {
		return errdefs.Invalid("%v", err)
	}
	return nil
}

// CanonicalRule returns the form two spellings of one rule share.
func (b *Backend) CanonicalRule(rule string) (string, error) {
	r, err := network.ParseRule(rule)
	if err != nil {
		return "", errdefs.Invalid("%v", err)
	}
	return r.String(), nil
}

// AllowsTCP reports whether the rules allow TCP to port of host.
func (b *Backend) AllowsTCP(allow []string, host string, port uint16) bool {
	rules, err := network.ParseRules(allow)
	return err == nil && network.AllowsTCP(rules, host, port)
}

// EgressCA, Allocate and SetRules: egress.go.

// Diff is refused: the pod's root layer is the container runtime's.
func (b *Backend) Diff(ctx context.Context, sb *sandbox.Sandbox) ([]node.Change, error) {
	return nil, notOnKube("diff", "a pod's writable root layer belongs to the node's container runtime, out of the daemon's reach")
}

// QuarantineFiles is refused with quarantine itself.
func (b *Backend) QuarantineFiles(ctx context.Context, sb *sandbox.Sandbox) (node.FileSource, error) {
	return nil, notOnKube("quarantine", whyFreeze)
}

// CommitLayer is refused: templates are built on the local backend and
// given to pods as images.
func (b *Backend) CommitLayer(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
	return "", notOnKube("template builds", "a pod's root is its container image; build templates on a local daemon and push them as images")
}
