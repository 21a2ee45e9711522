// The console's building blocks. Everything from the API is rendered as
// text by Preact (text nodes and DOM properties, never markup): a file
// name or label that looks like HTML stays text.
import type { ComponentChildren, JSX } from "preact";
import { useEffect, useState } from "preact/hooks";
import { words } from "../api";
import { stateWord } from "../format";

export function Card(props: { title?: string; wide?: boolean; id?: string; children?: ComponentChildren; actions?: ComponentChildren }) {
  const h = props.title ? props.title.toLowerCase().replace(/[^a-z0-9]+/g, "-") + "-h" : undefined;
  return (
    <section class={"card" + (props.wide ? " wide" : "")} id={props.id} aria-labelledby={h}>
      {props.title && (
        <div class="card-head">
          <h2 id={h}>{props.title}</h2>
          {props.actions}
        </div>
      )}
      {props.children}
    </section>
  );
}

export type Column<T> = {
  label: string;
  get: (row: T) => ComponentChildren;
  cls?: string;
  wrap?: boolean;
  sort?: (row: T) => string | number;
};

export function Table<T>(props: {
  id?: string;
  cols: Column<T>[];
  rows: T[];
  rowKey?: (row: T) => string;
  empty?: string;
  caption?: string;
  sortable?: boolean;
}) {
  const [sortBy, setSortBy] = useState<{ i: number; desc: boolean } | null>(null);
  let rows = props.rows;
  if (sortBy && props.cols[sortBy.i].sort) {
    const f = props.cols[sortBy.i].sort!;
    rows = [...rows].sort((a, b) => {
      const x = f(a), y = f(b);
      const c = x < y ? -1 : x > y ? 1 : 0;
      return sortBy.desc ? -c : c;
    });
  }
  return (
    <table id={props.id}>
      {props.caption && <caption class="sr-only">{props.caption}</caption>}
      <thead>
        <tr>
          {props.cols.map((c, i) => (
            <th scope="col" class={c.cls} aria-sort={sortBy?.i === i ? (sortBy.desc ? "descending" : "ascending") : undefined}>
              {c.sort && props.sortable ? (
                <button type="button" class="th-sort" onClick={() => setSortBy({ i, desc: sortBy?.i === i ? !sortBy.desc : false })}>
                  {c.label}
                  {sortBy?.i === i ? (sortBy.desc ? " ▼" : " ▲") : ""}
                </button>
              ) : (
                c.label
              )}
            </th>
          ))}
        </tr>
      </thead>
      <tbody>
        {rows.map((r) => (
          <tr key={props.rowKey ? props.rowKey(r) : undefined} data-id={props.rowKey ? props.rowKey(r) : undefined}>
            {props.cols.map((c) => (
              <td class={[c.cls, c.wrap ? "wrap" : ""].filter(Boolean).join(" ") || undefined}>{c.get(r)}</td>
            ))}
          </tr>
        ))}
        {!rows.length && (
          <tr>
            <td class="muted" colSpan={props.cols.length}>
              {props.empty || "none"}
            </td>
          </tr>
        )}
      </tbody>
    </table>
  );
}

/** A definition list; empty values are left out. */
export function KV(props: { items: [string, ComponentChildren][] }) {
  return (
    <dl>
      {props.items
        .filter(([, v]) => v !== undefined && v !== null && v !== "" && v !== false)
        .map(([k, v]) => [<dt>{k}</dt>, <dd>{v}</dd>])}
    </dl>
  );
}

export const StateBadge = (p: { state: string }) => <span class={"state " + p.state}>{stateWord(p.state)}</span>;

export function ErrorText(props: { error: unknown; id?: string }) {
  if (!props.error) return null;
  return (
    <p class="error" role="alert" id={props.id}>
      {words(props.error)}
    </p>
  );
}

/** A note in words where the caller lacks a right. */
export const Notice = (p: { children: ComponentChildren; id?: string }) => (
  <p class="notice" id={p.id}>
    {p.children}
  </p>
);

export const Loading = () => <p class="muted loading">loading…</p>;

/** Loads f() when deps change; reload() loads again. */
export function useLoad<T>(f: (signal: AbortSignal) => Promise<T>, deps: unknown[]) {
  const [state, setState] = useState<{ data?: T; error?: unknown; loading: boolean }>({ loading: true });
  const [n, setN] = useState(0);
  useEffect(() => {
    const ac = new AbortController();
    f(ac.signal).then(
      (data) => !ac.signal.aborted && setState({ data, loading: false }),
      (error) => !ac.signal.aborted && setState({ error, loading: false }),
    );
    return () => ac.abort();
  }, [...deps, n]);
  return { ...state, reload: () => setN((x) => x + 1) };
}

/** Re-renders every ms milliseconds (relative times). */
export function useTick(ms: number) {
  const [, set] = useState(0);
  useEffect(() => {
    const t = setInterval(() => set((x) => x + 1), ms);
    return () => clearInterval(t);
  }, [ms]);
}

/** A button that runs an async action, shows it busy, and reports its error. */
export function Action(props: {
  label: string;
  run: () => Promise<unknown>;
  onError: (e: unknown) => void;
  danger?: boolean;
  confirm?: string;
  op?: string;
  id?: string;
  disabled?: boolean;
}) {
  const [busy, setBusy] = useState(false);
  // A destructive action asks twice, on the page (no dialog): the first
  // press arms it, the second runs it.
  const [armed, setArmed] = useState(false);
  return (
    <button
      type="button"
      class={"act" + (props.danger ? " danger" : "")}
      id={props.id}
      data-op={props.op}
      disabled={busy || props.disabled}
      aria-busy={busy}
      onClick={async () => {
        if (props.confirm && !armed) {
          setArmed(true);
          return;
        }
        setArmed(false);
        setBusy(true);
        props.onError(null);
        try {
          await props.run();
        } catch (e) {
          props.onError(e);
        } finally {
          setBusy(false);
        }
      }}
    >
      {armed ? props.confirm : props.label}
    </button>
  );
}

export function Field(props: { label: string; id: string; hint?: string; children: JSX.Element }) {
  return (
    <div class="field">
      <label for={props.id}>{props.label}</label>
      {props.children}
      {props.hint && <small class="muted">{props.hint}</small>}
    </div>
  );
}

export function PageTitle(props: { children: ComponentChildren }) {
  useEffect(() => {
    const h = document.querySelector("main h1") as HTMLElement | null;
    h?.focus();
  }, []);
  return <h1 tabIndex={-1}>{props.children}</h1>;
}
