// The sandboxes list: loaded by paging GET /v1/sandboxes (which leaves
// out unclaimed warm-pool members), kept current by the event stream
// (a state change patches its row; anything the list does not know yet
// re-pages the list, at most every 1.5 s — never one GET per sandbox),
// polled while the stream is down. Filter, search, sort, bulk delete, and
// the create form.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { ApiError, pages, sbPath, send, stream } from "../api";
import { useApp } from "../app";
import { Action, Card, ErrorText, Notice, PageTitle, StateBadge, Table, useTick, type Column } from "../components/ui";
import { ago, bytes, cpus, labelsText } from "../format";
import type { Event, Sandbox } from "../types";
import { CreateForm } from "./create";

function storageOf(sb: Sandbox): string {
  const parts: string[] = [];
  if (sb.disk && sb.disk.used_bytes !== undefined) parts.push(bytes(sb.disk.used_bytes) + (sb.disk.cap_bytes ? " of " + bytes(sb.disk.cap_bytes) : ""));
  if (sb.storage && sb.storage.used_bytes !== undefined) parts.push("volume " + bytes(sb.storage.used_bytes));
  return parts.join(", ");
}
export { storageOf };

/** The caller's sandboxes, live. */
export function useSandboxes() {
  const { live } = useApp();
  const [byID, setByID] = useState<Map<string, Sandbox> | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [streaming, setStreaming] = useState(false);
  const known = useRef(new Set<string>());
  useEffect(() => {
    const ac = new AbortController();
    let timer: ReturnType<typeof setTimeout> | null = null;
    let running = false;
    let again = false;
    const load = async () => {
      if (running) {
        again = true;
        return;
      }
      running = true;
      try {
        const all = await pages<Sandbox>("/v1/sandboxes", ac.signal);
        known.current = new Set(all.map((s) => s.id));
        setByID(new Map(all.map((s) => [s.id, s])));
        setError(null);
      } catch (e) {
        if (!ac.signal.aborted) setError(e);
      } finally {
        running = false;
        if (again && !ac.signal.aborted) {
          again = false;
          schedule();
        }
      }
    };
    const schedule = () => {
      if (timer) return;
      timer = setTimeout(() => {
        timer = null;
        load();
      }, 1500);
    };
    load();
    const onEvent = (ev: Event) => {
      if (!ev.sandbox_id) return;
      if (known.current.has(ev.sandbox_id)) {
        if (ev.to === "deleted") {
          known.current.delete(ev.sandbox_id);
          setByID((m) => {
            if (!m) return m;
            const n = new Map(m);
            n.delete(ev.sandbox_id);
            return n;
          });
          return;
        }
        if (ev.to) {
          setByID((m) => {
            const sb = m?.get(ev.sandbox_id);
            if (!m || !sb) return m;
            return new Map(m).set(ev.sandbox_id, { ...sb, state: ev.to! });
          });
        }
      }
      // Anything else (a new sandbox, a claimed pool member, a change of
      // fields an event does not carry) is read from the list itself.
      schedule();
    };
    // Only what comes next: the list is the state. Each time the stream
    // comes up (a reconnect resumes by Last-Event-ID) the list is read
    // again, so nothing between the last read and the stream is missed.
    stream("/v1/events?after=latest", onEvent, ac.signal, (up) => {
      setStreaming(up);
      live(up);
      if (up) load();
    });
    return () => {
      ac.abort();
      if (timer) clearTimeout(timer);
      live(null);
    };
  }, []);
  // While the stream is down the list is polled, so it never goes stale.
  useEffect(() => {
    if (streaming || !byID) return;
    const ac = new AbortController();
    const iv = setInterval(() => {
      pages<Sandbox>("/v1/sandboxes", ac.signal).then(
        (all) => {
          known.current = new Set(all.map((s) => s.id));
          setByID(new Map(all.map((s) => [s.id, s])));
        },
        () => {},
      );
    }, 3000);
    return () => {
      ac.abort();
      clearInterval(iv);
    };
  }, [streaming, !!byID]);
  return { sandboxes: byID ? [...byID.values()] : null, error };
}

function matches(sb: Sandbox, q: string): boolean {
  if (!q) return true;
  const hay = [sb.id, sb.name, sb.template, sb.state, labelsText(sb.labels)].join(" ").toLowerCase();
  return q
    .toLowerCase()
    .split(/\s+/)
    .filter(Boolean)
    .every((w) => hay.includes(w));
}

export function SandboxList() {
  const { rights } = useApp();
  const { sandboxes, error } = useSandboxes();
  const [q, setQ] = useState("");
  const [state, setState] = useState("");
  const [template, setTemplate] = useState("");
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [bulkError, setBulkError] = useState<unknown>(null);
  const [showCreate, setShowCreate] = useState(false);
  useTick(5000);
  const all = sandboxes || [];
  const states = useMemo(() => [...new Set(all.map((s) => s.state))].sort(), [sandboxes]);
  const templates = useMemo(() => [...new Set(all.map((s) => s.template))].sort(), [sandboxes]);
  const rows = all
    .filter((s) => matches(s, q) && (!state || s.state === state) && (!template || s.template === template))
    .sort((a, b) => (a.created_at < b.created_at ? 1 : -1));
  const canWrite = rights.can("sandboxes:write");
  const cols: Column<Sandbox>[] = [
    ...(canWrite
      ? [
          {
            label: "",
            get: (s: Sandbox) => (
              <input
                type="checkbox"
                class="pick"
                aria-label={"select " + (s.name || s.id)}
                checked={selected.has(s.id)}
                onChange={(e) => {
                  const n = new Set(selected);
                  if ((e.target as HTMLInputElement).checked) n.add(s.id);
                  else n.delete(s.id);
                  setSelected(n);
                }}
              />
            ),
          },
        ]
      : []),
    {
      label: "sandbox",
      sort: (s) => s.name || s.id,
      get: (s) => (
        <a href={"#/sandbox/" + encodeURIComponent(s.id)} class="sb-link">
          {s.name || s.id}
        </a>
      ),
    },
    { label: "state", sort: (s) => s.state, get: (s) => <StateBadge state={s.state} /> },
    { label: "template", sort: (s) => s.template, get: (s) => s.template },
    { label: "age", sort: (s) => s.created_at, get: (s) => ago(s.created_at) },
    { label: "last active", cls: "hide-sm", sort: (s) => s.last_activity_at || "", get: (s) => ago(s.last_activity_at) },
    { label: "resources", cls: "hide-sm", get: (s) => [cpus(s.resources?.cpus), bytes(s.resources?.memory_bytes)].filter(Boolean).join(", ") },
    { label: "storage", cls: "hide-sm", get: (s) => storageOf(s) },
    { label: "labels", cls: "hide-sm", wrap: true, get: (s) => labelsText(s.labels) },
  ];
  const picked = rows.filter((s) => selected.has(s.id));
  return (
    <>
      <PageTitle>Sandboxes</PageTitle>
      {canWrite ? (
        <p>
          <button type="button" class="act primary" id="new-sandbox" aria-expanded={showCreate} onClick={() => setShowCreate(!showCreate)}>
            {showCreate ? "Close the form" : "New sandbox"}
          </button>
        </p>
      ) : (
        <Notice id="viewer-note">{rights.lacks("sandboxes:write", "create or delete sandboxes")}</Notice>
      )}
      {showCreate && <CreateForm onCreated={(sb) => (location.hash = "#/sandbox/" + encodeURIComponent(sb.id))} />}
      <Card>
        <form class="row filters" role="search" onSubmit={(e) => e.preventDefault()}>
          <label class="sr-only" for="sb-search">
            Search sandboxes
          </label>
          <input type="search" id="sb-search" placeholder="search name, label, template…" value={q} onInput={(e) => setQ((e.target as HTMLInputElement).value)} />
          <label for="sb-state">state</label>
          <select id="sb-state" value={state} onChange={(e) => setState((e.target as HTMLSelectElement).value)}>
            <option value="">any</option>
            {states.map((s) => (
              <option value={s}>{s}</option>
            ))}
          </select>
          <label for="sb-template">template</label>
          <select id="sb-template" value={template} onChange={(e) => setTemplate((e.target as HTMLSelectElement).value)}>
            <option value="">any</option>
            {templates.map((s) => (
              <option value={s}>{s}</option>
            ))}
          </select>
          <span class="muted" id="sb-count">
            {sandboxes ? rows.length + " of " + all.length : ""}
          </span>
          {canWrite && picked.length > 0 && (
            <Action
              id="bulk-delete"
              danger
              label={"Delete " + picked.length + " selected"}
              confirm={"Really delete " + picked.length + "?"}
              onError={setBulkError}
              run={async () => {
                const errs: string[] = [];
                for (const s of picked) {
                  try {
                    await send("DELETE", sbPath(s.id) + "?force=true");
                  } catch (e) {
                    errs.push((s.name || s.id) + ": " + (e instanceof ApiError ? e.words() : String(e)));
                  }
                }
                setSelected(new Set());
                if (errs.length) throw new Error(errs.join("\n"));
              }}
            />
          )}
        </form>
        <ErrorText error={error || bulkError} />
        {sandboxes === null ? (
          <p class="muted">loading…</p>
        ) : (
          <Table id="sandboxes" cols={cols} rows={rows} rowKey={(s) => s.id} sortable caption="Sandboxes" empty={all.length ? "no sandbox matches" : "no sandboxes yet"} />
        )}
      </Card>
    </>
  );
}
