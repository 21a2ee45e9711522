// The audit log: filters (actor, action, target, since), newest first,
// and a check of its hash chain (POST /v1/audit/verify).
import { useState } from "preact/hooks";
import { get, send } from "../api";
import { useApp } from "../app";
import { Card, ErrorText, Loading, PageTitle, Table, useLoad } from "../components/ui";
import { ago, when } from "../format";
import type { APIKey, AuditEntry } from "../types";
import { Denied } from "./admin";

type Verify = { ok: boolean; checked: number; pending: number; bad?: { tenant: string; seq: number; reason: string } };

export function Audit() {
  const { rights } = useApp();
  const [f, setF] = useState({ actor: "", action: "", target: "", since: "" });
  const [applied, setApplied] = useState(f);
  const q = new URLSearchParams({ limit: "200" });
  for (const [k, v] of Object.entries(applied)) if (v) q.set(k, k === "since" ? new Date(v).toISOString() : v);
  const a = useLoad(
    (signal) => (rights.can("audit") ? get<AuditEntry[] | { entries: AuditEntry[] }>("/v1/audit?" + q, { signal }) : Promise.resolve([])),
    [q.toString()],
  );
  // Actors are "key:<id>": named by their key's name where the caller may list keys.
  const keys = useLoad((signal) => (rights.can("keys") ? get<APIKey[]>("/v1/keys", { signal }) : Promise.resolve([])), []);
  const names = new Map((keys.data || []).map((k) => ["key:" + k.id, k.name || k.prefix + "…"]));
  const [verify, setVerify] = useState<Verify | null>(null);
  const [error, setError] = useState<unknown>(null);
  if (!rights.can("audit")) return <Denied title="Audit log" why={rights.lacks("audit", "read the audit log")} />;
  const rows = (a.data ? (Array.isArray(a.data) ? a.data : a.data.entries) : []).slice().reverse(); // newest first
  const input = (k: keyof typeof f, label: string, type: "text" | "datetime-local" = "text") => (
    <>
      <label for={"audit-" + k}>{label}</label>
      <input id={"audit-" + k} type={type as "text"} value={f[k]} onInput={(e) => setF({ ...f, [k]: (e.target as HTMLInputElement).value })} />
    </>
  );
  return (
    <>
      <PageTitle>Audit log</PageTitle>
      <Card>
        <form
          class="row filters"
          id="audit-filters"
          onSubmit={(e) => {
            e.preventDefault();
            setApplied(f);
          }}
        >
          {input("actor", "actor")}
          {input("action", "action")}
          {input("target", "target")}
          {input("since", "since", "datetime-local")}
          <button class="act" type="submit">
            Filter
          </button>
          <button
            class="act"
            type="button"
            id="audit-verify"
            onClick={async () => {
              setError(null);
              try {
                setVerify(await send<Verify>("POST", "/v1/audit/verify"));
              } catch (e) {
                setError(e);
              }
            }}
          >
            Verify the chain
          </button>
        </form>
        {verify && (
          <p role="status" id="audit-verified" class={verify.ok ? "ok" : "error"}>
            {verify.ok
              ? `The log is intact: ${verify.checked} entries checked${verify.pending ? ", " + verify.pending + " still in progress" : ""}.`
              : `The log was altered: entry ${verify.bad?.seq} of ${verify.bad?.tenant || "the host"} — ${verify.bad?.reason}.`}
          </p>
        )}
        <ErrorText error={a.error || error} />
        {a.loading ? (
          <Loading />
        ) : (
          <Table
            id="audit"
            rows={rows}
            rowKey={(x) => x.tenant + "/" + x.seq}
            empty="no entries"
            cols={[
              { label: "#", get: (x) => x.seq },
              { label: "when", get: (x) => <span title={when(x.time)}>{ago(x.time)}</span> },
              { label: "who", get: (x) => (names.has(x.actor) ? <span title={x.actor}>{names.get(x.actor)}</span> : x.actor) },
              { label: "did", wrap: true, get: (x) => x.action },
              { label: "to", wrap: true, get: (x) => x.target },
              { label: "result", get: (x) => x.result },
              { label: "tenant", cls: "hide-sm", get: (x) => x.tenant || "host" },
            ]}
          />
        )}
      </Card>
    </>
  );
}
