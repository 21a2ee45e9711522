// Forks and snapshots as a tree: the sandbox's oldest known ancestor at
// the root, each sandbox's forks under it and its snapshots beside them.
// The page fetches the records (a bounded number); this file only shapes
// them, so it is tested alone.
import type { Sandbox, Snapshot } from "./types";

export type Known = { sb: Sandbox | null; snaps: Snapshot[] }; // sb null: gone or not readable

export type Row = {
  depth: number;
  kind: "sandbox" | "snapshot" | "more";
  id: string;
  sb?: Sandbox | null;
  snap?: Snapshot;
  current?: boolean;
};

/** The rows of the tree under root, depth first, forks before snapshots. */
export function treeRows(root: string, known: Map<string, Known>, current: string, maxRows = 200): Row[] {
  const rows: Row[] = [];
  const seen = new Set<string>();
  const walk = (id: string, depth: number) => {
    if (seen.has(id) || rows.length >= maxRows) return;
    seen.add(id);
    const k = known.get(id);
    rows.push({ depth, kind: "sandbox", id, sb: k?.sb ?? null, current: id === current });
    if (!k) return;
    for (const c of k.sb?.lineage?.children || []) {
      if (known.has(c)) walk(c, depth + 1);
      else if (rows.length < maxRows) rows.push({ depth: depth + 1, kind: "more", id: c });
    }
    for (const s of k.snaps) if (rows.length < maxRows) rows.push({ depth: depth + 1, kind: "snapshot", id: s.id, snap: s });
  };
  walk(root, 0);
  return rows;
}

/** The oldest ancestor of id among known (a parent not known ends the walk). */
export function rootOf(id: string, known: Map<string, Known>): string {
  let cur = id;
  const seen = new Set<string>([cur]);
  for (;;) {
    const p = known.get(cur)?.sb?.lineage?.parent;
    if (!p || !known.has(p) || seen.has(p)) return cur;
    seen.add(p);
    cur = p;
  }
}
