// A sandbox: its summary in humane values, the actions its state and the
// caller's rights allow, its timeline (live), terminal, files,
// processes with their logs, network rules (editable with the network
// right), flow log, forks and snapshots.
import { useEffect, useState } from "preact/hooks";
import { ApiError, get, sbPath, send, stream, text } from "../api";
import { useApp } from "../app";
import { FileBrowser } from "../components/files";
import { Terminal } from "../components/terminal";
import { Action, Card, ErrorText, KV, Loading, Notice, PageTitle, StateBadge, Table, useLoad, useTick } from "../components/ui";
import { ago, bytes, cpus, duration, labelsText, when } from "../format";
import { opWords, opsFor, type Op } from "../rights";
import type { Event, Flow, NetworkRules, Process, ProcessList, Sandbox, Snapshot } from "../types";
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
  const refresh = () => get<Sandbox>(path).then(setSb, (e) => (e instanceof ApiError && e.status === 404 ? setLoadError(e) : null));
  useEffect(() => {
    const ac = new AbortController();
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
      let pending: ReturnType<typeof setTimeout> | null = null;
      stream(
        path + "/events",
        (e) => {
          setEvents((old) => (old.some((x) => x.id === e.id) ? old : [...old, e]));
          if (!pending) pending = setTimeout(() => ((pending = null), refresh()), 300);
        },
        ac.signal,
        () => {},
        last,
      );
    })();
    return () => ac.abort();
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

function Lineage(props: { sb: Sandbox }) {
  const { rights } = useApp();
  const path = sbPath(props.sb.id);
  const snaps = useLoad((signal) => get<Snapshot[]>(path + "/snapshots", { signal }), [props.sb.id]);
  const [error, setError] = useState<unknown>(null);
  const [name, setName] = useState("");
  const can = rights.can("sandboxes:write") && (props.sb.state === "running" || props.sb.state === "paused" || props.sb.state === "stopped");
  return (
    <Card title="Forks and snapshots" wide id="lineage">
      <ErrorText error={snaps.error || error} />
      {props.sb.lineage?.parent && <p>Forked from {link(props.sb.lineage.parent)}.</p>}
      {props.sb.lineage?.children?.length ? (
        <ul class="tree">
          {props.sb.lineage.children.map((c) => (
            <li>fork {link(c)}</li>
          ))}
        </ul>
      ) : (
        <p class="muted">No forks.</p>
      )}
      <Table
        id="snapshots"
        rows={snaps.data || []}
        rowKey={(s) => s.id}
        empty="no snapshots"
        cols={[
          { label: "snapshot", get: (s) => s.name || s.id },
          { label: "size", get: (s) => bytes(s.size_bytes) },
          { label: "taken", get: (s) => ago(s.created_at) },
          { label: "expires", cls: "hide-sm", get: (s) => (s.expires_at ? ago(s.expires_at) : "never") },
        ]}
      />
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
            snaps.reload();
          }} onError={setError} />
        </div>
      )}
    </Card>
  );
}
