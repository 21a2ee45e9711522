package engine

import (
	"context"
	"fmt"

	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
)

// assignIDs gives sb its host id range (idempotent: a retried create gets
// the slot it already holds). The caller records sb.
func (m *Engine) assignIDs(ctx context.Context, sb *sandbox.Sandbox) error {
	if sb.Spec.IDs != nil {
		return nil
	}
	if shared, own := m.node.IDRange(-1); !own {
		sb.Spec.IDs = &shared
		return nil
	}
	slot, err := m.store.AllocateIDSlot(ctx, sb.ID, m.cfg.Node, idSlotLimit)
	if err != nil {
		return fmt.Errorf("host id range: %w", err)
	}
	ids, _ := m.node.IDRange(slot)
	sb.Spec.IDs = &ids
	return nil
}

// ensureIDs assigns and records a range for a record made without one
// (before ranges existed, or by an interrupted create).
func (m *Engine) ensureIDs(ctx context.Context, sb *sandbox.Sandbox) error {
	if sb.Spec.IDs != nil {
		return nil
	}
	if err := m.assignIDs(ctx, sb); err != nil {
		return err
	}
	return m.store.UpdateSandbox(ctx, sb)
}

// releaseIDs frees sb's range once nothing of it is left on the host.
func (m *Engine) releaseIDs(ctx context.Context, sb *sandbox.Sandbox) error {
	if err := m.store.ReleaseIDSlot(ctx, sb.ID); err != nil {
		return err
	}
	sb.Spec.IDs = nil
	return nil
}

// doctorIDs finds id slots this node holds for sandboxes that are gone (a
// create interrupted between taking the slot and writing the record).
func (m *Engine) doctorIDs(ctx context.Context, busy func(string) bool, live map[string]*sandbox.Sandbox, add func(kind, id, detail string, fixFn func() error)) {
	held, err := m.store.ListIDSlots(ctx, m.cfg.Node)
	if err != nil {
		add("ids", "", "listing id slots: "+err.Error(), nil)
		return
	}
	first := !m.idSwept.Swap(true)
	for id, slot := range held {
		if busy(id) || live[id] != nil {
			continue
		}
		if _, err := m.store.GetSandbox(ctx, owner(ctx), id); err != nil && !first {
			// No record yet: outside the startup sweep that may be a
			// create between taking its slot and writing its record.
			continue
		}
		ids, _ := m.node.IDRange(slot)
		add("ids", id, fmt.Sprintf("host id slot %d (uid %d) held for no live sandbox", slot, ids.Base), func() error {
			return m.store.ReleaseIDSlot(ctx, id)
		})
	}
}

// idSlotLimit bounds the host id slots of one node.
const idSlotLimit = node.MaxIDSlots
