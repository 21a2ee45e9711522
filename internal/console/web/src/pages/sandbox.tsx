// A sandbox: its summary in humane values, the actions its state and the
// caller's rights allow, its timeline (live), terminal, files,
// processes with their logs, network rules (editable with the network
// right), flow log, resources over time, forks and snapshots as a tree.
import { useEffect, useState } from "preact/hooks";
import { ApiError, get, sbPath, send, stream, text } from "../api";
import { useApp } from "../app";
import { FileBrowser } from "../components/files";
import { Terminal } from "../components/terminal";
import { Action, Card, ErrorText, KV, Loading, Notice, PageTitle, StateBadge, Table, useLoad, useTick } from "../components/ui";
import { ago, bytes, cpus, duration, labelsText, when } from "../format";
import { opWords, opsFor, type Op } from "../rights";
import type { Event, Flow, NetworkRules, Process, ProcessList, Sandbox, SandboxUsage, Snapshot } from "../types";
import { Spark } from "../components/chart";
import { rootOf, treeRows, type Known, type Row } from "../lineage";
import { storageOf } from "./sandboxes";

const link = (id: string) => <a href={"#/sandbox/" + encodeURIComponent(id)}>{id}</a>;

export function SandboxPage(props: { id: string }) {
  const { rights, version } = useApp();
  const [sb, setSb] = useState<Sandbox | null>(null);
  const [loadError, setLoadError] = useState<unknown>(null);
  const [actError, setActError] = useState<unknown>(null);
  const [events, setEvents] = useState<Event[]>([]);
  const path = sbPath(props.id);
  useTick(10000);
  const refresh = (signal: AbortSignal) =>
    get<Sandbox>(path, { signal }).then(setSb, (e) => (e instanceof ApiError && e.status === 404 ? setLoadError(e) : null));
  useEffect(() => {
    const ac = new AbortController();
    // An event re-reads the sandbox 300 ms later, at most once meanwhile;
    // leaving the page (or signing out) cancels it.
    let pending: ReturnType<typeof setTimeout> | null = null;
    (async () => {
      try {
        setSb(await get<Sandbox>(path, { signal: ac.signal }));
      } catch (e) {
        if (!ac.signal.aborted) setLoadError(e);
        return;
      }
      let last = 0;
      try {
        const evs = await get<Event[]>(path + "/events?limit=500", { signal: ac.signal });
        setEvents(evs);
        for (const e of evs) last = Math.max(last, e.id);
      } catch {
        /* the stream below still runs */
      }
      stream(
        path + "/events",
        (e) => {
          setEvents((old) => (old.some((x) => x.id === e.id) ? old : [...old, e]));
          if (!pending && !ac.signal.aborted) pending = setTimeout(() => ((pending = null), refresh(ac.signal)), 300);
        },
        ac.signal,
        () => {},
        last,
      );
    })();
    return () => {
      ac.abort();
      if (pending) clearTimeout(pending);
    };
  }, [props.id]);

  if (loadError) {
    return (
      <>
        <PageTitle>{props.id}</PageTitle>
        <ErrorText error={loadError} />
      </>
    );
  }
  if (!sb) return <Loading />;
  const cls = version?.classes?.find((c) => c.name === sb.isolation?.runtime);
  const ops: Op[] = rights.can("sandboxes:write") ? opsFor(sb, !!cls?.capabilities.checkpoint) : [];
  const run = (op: Op) => async () => {
    if (op === "delete") {
      await send("DELETE", path + "?force=true");
      location.hash = "#/sandboxes";
      return;
    }
    setSb(await send<Sandbox>("POST", path + "/" + op));
  };
  const running = sb.state === "running";
  return (
    <>
      <PageTitle>
        {sb.name || sb.id} <StateBadge state={sb.state} />
      </PageTitle>
      <div class="row" id="actions">
        {ops.map((op) => (
          <Action op={op} label={opWords[op]} danger={op === "delete"} confirm={op === "delete" ? "Really delete?" : undefined} run={run(op)} onError={setActError} />
        ))}
        {!rights.can("sandboxes:write") && <Notice id="no-actions">{rights.lacks("sandboxes:write", "pause, stop or delete this sandbox")}</Notice>}
      </div>
      <ErrorText error={actError} id="action-error" />
      <div class="grid">
        <Card title="Summary" id="summary">
          <KV
            items={[
              ["id", <code>{sb.id}</code>],
              ["template", sb.template],
              ["state", <><StateBadge state={sb.state} />{sb.reason ? " — " + sb.reason : ""}</>],
              ["kind", sb.persistent ? "persistent (survives stop and start)" : "ephemeral"],
              ["created", <span title={when(sb.created_at)}>{ago(sb.created_at)}</span>],
              ["last active", sb.last_activity_at && <span title={when(sb.last_activity_at)}>{ago(sb.last_activity_at)}</span>],
              ["expires", sb.expires_at && <span title={when(sb.expires_at)}>{ago(sb.expires_at)}</span>],
              ["next", sb.next_action ? sb.next_action + " " + ago(sb.next_action_at) : ""],
              ["host name", sb.hostname],
              ["address", [sb.ipv4, sb.ipv6].filter(Boolean).join(", ")],
              ["labels", labelsText(sb.labels)],
              ["isolation", sb.isolation && sb.isolation.runtime + (sb.isolation.user_namespace ? ", user namespace" : "") + (sb.isolation.shared_kernel ? ", shared kernel" : ", own kernel")],
              ["error", sb.error],
              ["forked from", sb.lineage?.parent && link(sb.lineage.parent)],
              ["from snapshot", sb.lineage?.from_snapshot],
              ["forks", sb.lineage?.children?.length ? <span>{sb.lineage.children.map((c) => [link(c), " "])}</span> : ""],
            ]}
          />
        </Card>
        <Card title="Resources and policies" id="resources">
          <KV
            items={[
              ["CPUs", cpus(sb.resources?.cpus)],
              ["memory", bytes(sb.resources?.memory_bytes)],
              ["processes", sb.resources?.pids ? "up to " + sb.resources.pids : ""],
              ["disk", storageOf(sb) + (sb.disk && !sb.disk.enforced ? " (cap not enforced)" : "")],
              ["timeout", sb.timeout_seconds ? duration(sb.timeout_seconds) : "none"],
              ["when idle", sb.policy?.idle_timeout_seconds ? (sb.policy.on_idle || "pause") + " after " + duration(sb.policy.idle_timeout_seconds) : ""],
              ["at most", sb.policy?.max_age_seconds ? duration(sb.policy.max_age_seconds) + ", then " + (sb.policy.on_max_age || "stop") : ""],
              ["kept stopped for", sb.policy?.retention_seconds ? duration(sb.policy.retention_seconds) : ""],
              ["wakes on use", sb.policy?.auto_resume ? "yes" : ""],
            ]}
          />
        </Card>
        <NetworkCard sb={sb} />
        <Card title="Terminal" wide id="terminal-card">
          {!rights.can("exec") ? (
            <Notice id="terminal-note">{rights.lacks("exec", "open a terminal or run commands")}</Notice>
          ) : !running ? (
            <Notice id="terminal-note">The terminal opens while the sandbox is running; it is {sb.state} now.</Notice>
          ) : (
            <Terminal id={sb.id} />
          )}
        </Card>
        <Card title="Files" wide id="files">
          {!rights.can("files") ? (
            <Notice>{rights.lacks("files", "read or write its files")}</Notice>
          ) : !running ? (
            <Notice>Files can be browsed while the sandbox is running; it is {sb.state} now.</Notice>
          ) : (
            <FileBrowser id={sb.id} start={sb.workdir || "/tmp"} />
          )}
        </Card>
        <Card title="Timeline" wide>
          <Table
            id="timeline"
            rows={[...events].reverse()}
            rowKey={(e) => String(e.id)}
            empty="no events"
            cols={[
              { label: "when", get: (e) => <span title={when(e.time)}>{ago(e.time)}</span> },
              { label: "what", get: (e) => e.type + (e.from || e.to ? ": " + (e.from || "") + " → " + (e.to || "") : "") },
              { label: "by", cls: "hide-sm", get: (e) => [e.actor, e.cause].filter(Boolean).join(", ") },
              { label: "detail", wrap: true, get: (e) => [e.reason, e.outcome, e.message].filter(Boolean).join(" — ") },
            ]}
          />
        </Card>
        <Usage sb={sb} />
        <Processes sb={sb} />
        <Flows id={sb.id} />
        <Lineage sb={sb} />
      </div>
    </>
  );
}

function NetworkCard(props: { sb: Sandbox }) {
  const { rights } = useApp();
  const path = sbPath(props.sb.id) + "/network";
  const n = useLoad((signal) => get<NetworkRules>(path, { signal }), [props.sb.id]);
  const [rule, setRule] = useState("");
  const [error, setError] = useState<unknown>(null);
  const change = async (body: { allow?: string[]; deny?: string[] }) => {
    setError(null);
    try {
      await send("POST", path, body);
      setRule("");
      n.reload();
    } catch (e) {
      setError(e);
    }
  };
  const canEdit = rights.can("network") && n.data?.mode === "egress";
  return (
    <Card title="Network" id="network">
      <ErrorText error={n.error || error} />
      {n.data && (
        <>
          <p>
            {n.data.mode === "none" ? "No network: the sandbox reaches nothing." : "Egress: only what these rules allow."}
          </p>
          {n.data.mode === "egress" && (
            <ul class="rules" id="rules">
              {!n.data.allow.length && <li class="muted">no rule: nothing is allowed</li>}
              {n.data.allow.map((r) => (
                <li>
                  <code>{r}</code>{" "}
                  {canEdit && (
                    <button type="button" class="act small" onClick={() => change({ deny: [r] })}>
                      Remove<span class="sr-only"> {r}</span>
                    </button>
                  )}
                </li>
              ))}
            </ul>
          )}
          {canEdit && (
            <form
              class="row"
              onSubmit={(e) => {
                e.preventDefault();
                if (rule.trim()) change({ allow: [rule.trim()] });
              }}
            >
              <label for="rule-add">Allow</label>
              <input type="text" id="rule-add" placeholder="host, *.domain, CIDR, :port" value={rule} onInput={(e) => setRule((e.target as HTMLInputElement).value)} />
              <button type="submit" class="act">
                Add rule
              </button>
            </form>
          )}
          {!rights.can("network") && n.data.mode === "egress" && <p class="muted">Changing rules needs the “network” right.</p>}
        </>
      )}
    </Card>
  );
}

function Processes(props: { sb: Sandbox }) {
  const { rights } = useApp();
  const path = sbPath(props.sb.id) + "/processes";
  const ps = useLoad((signal) => (rights.can("exec") ? get<ProcessList>(path, { signal }) : Promise.resolve({ processes: [] })), [props.sb.id]);
  const [logs, setLogs] = useState<{ id: string; text: string } | null>(null);
  const [error, setError] = useState<unknown>(null);
  const showLogs = async (p: Process) => {
    setError(null);
    try {
      const nd = await text(path + "/" + encodeURIComponent(p.id) + "/logs");
      let out = "";
      for (const line of nd.split("\n")) {
        if (!line) continue;
        const ev = JSON.parse(line);
        if (ev.data) out += new TextDecoder().decode(Uint8Array.from(atob(ev.data), (c) => c.charCodeAt(0)));
        if (ev.gap) out += `\n[${bytes(ev.gap)} of output dropped]\n`;
        if (ev.exit) out += `\n[exited with status ${ev.exit.code}]\n`;
      }
      setLogs({ id: p.id, text: out });
    } catch (e) {
      setError(e);
    }
  };
  return (
    <Card
      title="Processes"
      wide
      id="processes-card"
      actions={
        <button type="button" class="act small" onClick={ps.reload}>
          Refresh
        </button>
      }
    >
      {!rights.can("exec") && <Notice>{rights.lacks("exec", "see its processes and their logs")}</Notice>}
      <ErrorText error={ps.error || error} />
      <Table
        id="processes"
        rows={ps.data?.processes || []}
        rowKey={(p) => p.id}
        empty="no background processes"
        cols={[
          { label: "process", get: (p) => p.tag || p.id },
          { label: "state", get: (p) => <StateBadge state={p.state} /> },
          { label: "command", wrap: true, get: (p) => <code>{(p.argv || []).join(" ")}</code> },
          { label: "started", cls: "hide-sm", get: (p) => ago(p.started) },
          { label: "exit", get: (p) => (p.exit ? "status " + p.exit.code : "") },
          {
            label: "",
            get: (p) =>
              rights.can("exec") ? (
                <button type="button" class="act small" onClick={() => showLogs(p)}>
                  Logs<span class="sr-only"> of {p.tag || p.id}</span>
                </button>
              ) : (
                ""
              ),
          },
        ]}
      />
      {logs && (
        <figure>
          <figcaption>Output of {logs.id}</figcaption>
          <pre class="logs" id="process-logs" tabIndex={0}>
            {logs.text || "(no output)"}
          </pre>
        </figure>
      )}
    </Card>
  );
}

function Flows(props: { id: string }) {
  const fl = useLoad((signal) => get<Flow[]>(sbPath(props.id) + "/flows", { signal }), [props.id]);
  return (
    <Card title="Flow log" wide id="flows">
      <ErrorText error={fl.error} />
      <Table
        rows={fl.data || []}
        empty="no connections or lookups yet"
        cols={[
          { label: "when", get: (f) => <span title={when(f.time)}>{ago(f.time)}</span> },
          { label: "what", get: (f) => (f.kind === "dns" ? "name lookup" : f.proto + " connection") },
          { label: "to", wrap: true, get: (f) => f.name ? f.name + " (" + f.dst + ")" : f.dst },
          { label: "decision", get: (f) => <span class={"decision " + f.decision}>{f.decision === "allow" ? "allowed" : "denied"}</span> },
          { label: "rule", cls: "hide-sm", wrap: true, get: (f) => f.rule },
        ]}
      />
    </Card>
  );
}

const pct = (v: number) => v.toFixed(v < 10 ? 1 : 0) + " %";
type UsagePt = { cpu: number | null; mem: number | null; disk: number | null; net: number | null };

/**
 * Resources over time: GET .../usage (the engine's accounting now) and the
 * flow log's new entries, sampled every 3 s while the page is open and the
 * sandbox runs (the daemon keeps no per-sandbox history).
 */
function Usage(props: { sb: Sandbox }) {
  const running = props.sb.state === "running";
  const [pts, setPts] = useState<UsagePt[]>([]);
  const [last, setLast] = useState<SandboxUsage | null>(null);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    if (!running) return;
    const ac = new AbortController();
    const path = sbPath(props.sb.id);
    let seq = -1;
    let prevT = 0;
    let busy = false;
    const sample = async () => {
      if (busy) return;
      busy = true;
      try {
        const u = await get<SandboxUsage>(path + "/usage", { signal: ac.signal });
        const fl = await get<Flow[]>(path + "/flows" + (seq >= 0 ? "?after=" + seq : ""), { signal: ac.signal });
        const t = Date.now();
        const net = seq >= 0 && prevT ? fl.length / ((t - prevT) / 60000) : null;
        for (const f of fl) seq = Math.max(seq, f.seq);
        if (seq < 0) seq = 0;
        prevT = t;
        setError(null);
        if (u.state === "running") setLast(u);
        // A sample of a sandbox that stopped running meanwhile is a gap.
        const on = u.state === "running";
        setPts((old) => [...old, on ? { cpu: u.cpu_percent, mem: u.memory_bytes, disk: u.disk_limit_bytes || u.disk_bytes ? u.disk_bytes : null, net }
          : { cpu: null, mem: null, disk: null, net: null }].slice(-60));
      } catch (e) {
        if (!ac.signal.aborted) setError(e);
      } finally {
        busy = false;
      }
    };
    sample();
    const iv = setInterval(sample, 3000);
    return () => {
      ac.abort();
      clearInterval(iv);
    };
  }, [props.sb.id, running]);
  const of = (k: keyof UsagePt) => pts.map((p) => p[k]);
  return (
    <Card title="Resources over time" wide id="usage">
      {!running ? (
        <Notice id="usage-note">Resource use is sampled while the sandbox runs; it is {props.sb.state} now.</Notice>
      ) : (
        <>
          <p class="muted">Sampled from the daemon every 3 s while this page is open.</p>
          <ErrorText error={error} />
          <div class="charts" id="usage-charts">
            <Spark id="cpu" title={"CPU (of " + cpus(last?.cpus || props.sb.resources?.cpus) + ")"} pts={of("cpu")} fmt={pct} max={100} />
            <Spark id="memory" title="Memory" pts={of("mem")} fmt={bytes} max={last?.memory_limit_bytes || undefined}
              note={last?.memory_limit_bytes ? "of " + bytes(last.memory_limit_bytes) : undefined} />
            <Spark id="disk" title="Disk (writable layer)" pts={of("disk")} fmt={bytes} max={last?.disk_limit_bytes || undefined}
              note={last?.disk_limit_bytes ? "of " + bytes(last.disk_limit_bytes) : last && !last.disk_bytes ? "on its volume: see Storage" : undefined} />
            <Spark id="network" title="Connections and lookups per minute" pts={of("net")} fmt={(v) => v.toFixed(1)} />
          </div>
        </>
      )}
    </Card>
  );
}

/**
 * Forks and snapshots as a tree: walks up to the oldest ancestor still
 * readable (at most 8 steps) and down through the forks (at most 40
 * sandboxes), each with its snapshots under it.
 */
function Lineage(props: { sb: Sandbox }) {
  const { rights } = useApp();
  const path = sbPath(props.sb.id);
  const [known, setKnown] = useState<Map<string, Known> | null>(null);
  const [n, setN] = useState(0);
  const [error, setError] = useState<unknown>(null);
  const [name, setName] = useState("");
  useEffect(() => {
    const ac = new AbortController();
    const signal = ac.signal;
    const snapsOf = (id: string) => get<Snapshot[]>(sbPath(id) + "/snapshots?limit=50", { signal }).catch(() => [] as Snapshot[]);
    const sbOf = (id: string) => get<Sandbox>(sbPath(id), { signal }).catch(() => null);
    (async () => {
      const m = new Map<string, Known>();
      m.set(props.sb.id, { sb: props.sb, snaps: await snapsOf(props.sb.id) });
      let cur: Sandbox | null = props.sb;
      for (let i = 0; i < 8 && cur?.lineage?.parent && !m.has(cur.lineage.parent); i++) {
        const pid: string = cur.lineage.parent;
        cur = await sbOf(pid);
        m.set(pid, { sb: cur, snaps: cur ? await snapsOf(pid) : [] });
      }
      const queue = [rootOf(props.sb.id, m)];
      const visited = new Set<string>();
      while (queue.length && m.size < 40) {
        const id = queue.shift()!;
        if (visited.has(id)) continue;
        visited.add(id);
        for (const c of m.get(id)?.sb?.lineage?.children || []) {
          if (!m.has(c)) {
            if (m.size >= 40) break;
            const s = await sbOf(c);
            m.set(c, { sb: s, snaps: s ? await snapsOf(c) : [] });
          }
          queue.push(c);
        }
      }
      if (!signal.aborted) setKnown(m);
    })().catch((e) => !signal.aborted && setError(e));
    return () => ac.abort();
  }, [props.sb.id, props.sb.lineage?.children?.length, n]);
  const can = rights.can("sandboxes:write") && (props.sb.state === "running" || props.sb.state === "paused" || props.sb.state === "stopped");
  const rows = known ? treeRows(rootOf(props.sb.id, known), known, props.sb.id) : [];
  const label = (r: Row) => {
    if (r.kind === "snapshot") {
      const s = r.snap!;
      return (
        <span>
          <span class="kind">snapshot</span> {s.name || s.id} <span class="muted">· {bytes(s.size_bytes)} · taken {ago(s.created_at)}
            {s.expires_at ? " · expires " + ago(s.expires_at) : ""}</span>
        </span>
      );
    }
    if (r.kind === "more") return <span><span class="kind">fork</span> {link(r.id)} <span class="muted">(not loaded)</span></span>;
    const sb = r.sb;
    return (
      <span>
        <span class="kind">{r.depth === 0 ? "sandbox" : "fork"}</span>{" "}
        {r.current ? <strong>{sb?.name || r.id}</strong> : <a href={"#/sandbox/" + encodeURIComponent(r.id)}>{sb?.name || r.id}</a>}{" "}
        {sb ? <StateBadge state={sb.state} /> : <span class="muted">(gone)</span>}
        {r.current && <span class="muted"> · this sandbox</span>}
        {sb?.lineage?.from_snapshot && <span class="muted"> · from snapshot {sb.lineage.from_snapshot}</span>}
      </span>
    );
  };
  return (
    <Card title="Forks and snapshots" wide id="lineage">
      <ErrorText error={error} />
      {!known ? (
        <Loading />
      ) : (
        <ul class="tree" id="lineage-tree" aria-label="Forks and snapshots, from the oldest ancestor">
          {rows.map((r) => (
            <li class={"d" + Math.min(r.depth, 8) + " " + r.kind} data-id={r.id} data-kind={r.kind} aria-current={r.current ? "true" : undefined}>
              {label(r)}
            </li>
          ))}
        </ul>
      )}
      {rows.length === 1 && <p class="muted">No forks or snapshots yet.</p>}
      {can && (
        <div class="row">
          <Action label="Fork" op="fork" run={async () => {
            const r = await send<{ children: Sandbox[] }>("POST", path + "/fork", { count: 1 });
            if (r.children?.[0]) location.hash = "#/sandbox/" + encodeURIComponent(r.children[0].id);
          }} onError={setError} />
          <label for="snap-name">Snapshot name</label>
          <input id="snap-name" type="text" value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
          <Action label="Take snapshot" op="snapshot" run={async () => {
            await send("POST", path + "/snapshots", name ? { name } : {});
            setName("");
            setN((x) => x + 1);
          }} onError={setError} />
        </div>
      )}
      {!rights.can("sandboxes:write") && <p class="muted">Forking and taking snapshots need the “sandboxes:write” right.</p>}
    </Card>
  );
}
