// Warm pools, volumes and snapshots (templates: templates.tsx): lists in humane values,
// with the actions the caller's rights allow.
import { useState } from "preact/hooks";
import { get, send } from "../api";
import { useApp } from "../app";
import { Action, Card, ErrorText, Loading, PageTitle, Table, useLoad } from "../components/ui";
import { ago, bytes, when } from "../format";
import type { Pool, Snapshot, Volume } from "../types";

const enc = encodeURIComponent;

export function Pools() {
  const p = useLoad((signal) => get<Pool[]>("/v1/pools", { signal }), []);
  return (
    <>
      <PageTitle>Warm pools</PageTitle>
      <p class="lead muted">Sandboxes started ahead of time, so a create is served at once. They are not anyone’s until claimed, and are never listed as sandboxes.</p>
      <Card>
        <ErrorText error={p.error} />
        {p.loading ? (
          <Loading />
        ) : (
          <Table
            id="pools"
            rows={p.data || []}
            rowKey={(x) => (x.tenant || "") + "/" + x.template}
            empty="no warm pools"
            cols={[
              { label: "template", get: (x) => x.template },
              { label: "owner", get: (x) => x.tenant || "shared" },
              { label: "ready", get: (x) => x.ready + " of " + x.min },
              { label: "starting", get: (x) => x.starting },
              { label: "served from the pool", get: (x) => (x.hits + x.misses ? Math.round((100 * x.hits) / (x.hits + x.misses)) + "% (" + x.hits + " of " + (x.hits + x.misses) + ")" : "") },
              { label: "note", wrap: true, cls: "hide-sm", get: (x) => x.reason },
            ]}
          />
        )}
      </Card>
    </>
  );
}

export function Volumes() {
  const { rights } = useApp();
  const v = useLoad((signal) => get<Volume[]>("/v1/volumes", { signal }), []);
  const [error, setError] = useState<unknown>(null);
  const canWrite = rights.can("sandboxes:write");
  return (
    <>
      <PageTitle>Volumes</PageTitle>
      <Card>
        <ErrorText error={v.error || error} />
        {v.loading ? (
          <Loading />
        ) : (
          <Table
            id="volumes"
            sortable
            rows={v.data || []}
            rowKey={(x) => x.name}
            empty="no volumes"
            cols={[
              { label: "volume", sort: (x) => x.name, get: (x) => x.name },
              { label: "state", get: (x) => x.state },
              { label: "used", sort: (x) => x.used_bytes, get: (x) => bytes(x.used_bytes) + " of " + bytes(x.size_bytes) },
              { label: "attached to", get: (x) => (x.attached_to ? <a href={"#/sandbox/" + enc(x.attached_to)}>{x.attached_to}</a> : "—") },
              { label: "created", cls: "hide-sm", get: (x) => <span title={when(x.created_at)}>{ago(x.created_at)}</span> },
              {
                label: "",
                get: (x) =>
                  canWrite && !x.attached_to ? (
                    <Action label="Delete" danger confirm="Really delete?" run={async () => { await send("DELETE", "/v1/volumes/" + enc(x.name)); v.reload(); }} onError={setError} />
                  ) : (
                    ""
                  ),
              },
            ]}
          />
        )}
      </Card>
    </>
  );
}

export function Snapshots() {
  const { rights } = useApp();
  const s = useLoad((signal) => get<Snapshot[]>("/v1/snapshots", { signal }), []);
  const [error, setError] = useState<unknown>(null);
  const canWrite = rights.can("sandboxes:write");
  return (
    <>
      <PageTitle>Snapshots</PageTitle>
      <Card>
        <ErrorText error={s.error || error} />
        {s.loading ? (
          <Loading />
        ) : (
          <Table
            id="snapshots"
            sortable
            rows={s.data || []}
            rowKey={(x) => x.id}
            empty="no snapshots"
            cols={[
              { label: "snapshot", sort: (x) => x.name || x.id, get: (x) => x.name || x.id },
              { label: "of sandbox", get: (x) => <a href={"#/sandbox/" + enc(x.sandbox_id)}>{x.sandbox_id}</a> },
              { label: "template", cls: "hide-sm", get: (x) => x.template },
              { label: "size", sort: (x) => x.size_bytes, get: (x) => bytes(x.size_bytes) },
              { label: "taken", sort: (x) => x.created_at, get: (x) => ago(x.created_at) },
              { label: "expires", cls: "hide-sm", get: (x) => (x.expires_at ? ago(x.expires_at) : "never") },
              {
                label: "",
                get: (x) =>
                  canWrite ? (
                    <span class="row-actions">
                      <Action label="Restore" confirm="Rewind its sandbox?" run={async () => {
                        const sb = await send<{ id: string }>("POST", "/v1/snapshots/" + enc(x.id) + "/restore");
                        if (sb?.id) location.hash = "#/sandbox/" + enc(sb.id);
                      }} onError={setError} />
                      <Action label="Delete" danger confirm="Really delete?" run={async () => { await send("DELETE", "/v1/snapshots/" + enc(x.id)); s.reload(); }} onError={setError} />
                    </span>
                  ) : (
                    ""
                  ),
              },
            ]}
          />
        )}
      </Card>
    </>
  );
}
