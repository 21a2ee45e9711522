// Secrets (names only: a value is written, never read back), API keys,
// tenants and their quotas — each shown only to a caller who may manage it.
import { useState } from "preact/hooks";
import { get, send } from "../api";
import { useApp } from "../app";
import { Action, Card, ErrorText, Field, Loading, Notice, PageTitle, Table, useLoad } from "../components/ui";
import { ago, bytes, when } from "../format";
import type { APIKey, CreatedAPIKey, Quota, Secret, Tenant } from "../types";

const enc = encodeURIComponent;

export function Secrets() {
  const { rights } = useApp();
  const s = useLoad((signal) => (rights.can("secrets") ? get<Secret[]>("/v1/secrets", { signal }) : Promise.resolve([])), []);
  const [error, setError] = useState<unknown>(null);
  const [name, setName] = useState("");
  const [value, setValue] = useState("");
  if (!rights.can("secrets")) return <Denied title="Secrets" why={rights.lacks("secrets", "see or change secrets")} />;
  return (
    <>
      <PageTitle>Secrets</PageTitle>
      <p class="muted">Values are written here and handed to sandboxes that name them; they are never shown again.</p>
      <Card>
        <ErrorText error={s.error || error} />
        {s.loading ? (
          <Loading />
        ) : (
          <Table
            id="secrets"
            rows={s.data || []}
            rowKey={(x) => x.name}
            empty="no secrets"
            cols={[
              { label: "secret", get: (x) => x.name },
              { label: "changed", get: (x) => <span title={when(x.updated_at)}>{ago(x.updated_at)}</span> },
              { label: "", get: (x) => <Action label="Delete" danger confirm="Really delete?" run={async () => { await send("DELETE", "/v1/secrets/" + enc(x.name)); s.reload(); }} onError={setError} /> },
            ]}
          />
        )}
      </Card>
      <Card title="Set a secret">
        <form
          class="form-grid"
          onSubmit={async (e) => {
            e.preventDefault();
            setError(null);
            try {
              await send("PUT", "/v1/secrets/" + enc(name.trim()), { value });
              setName("");
              setValue("");
              s.reload();
            } catch (err) {
              setError(err);
            }
          }}
        >
          <Field label="Name" id="secret-name">
            <input id="secret-name" type="text" required value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
          </Field>
          <Field label="Value" id="secret-value">
            <input id="secret-value" type="password" autocomplete="off" required value={value} onInput={(e) => setValue((e.target as HTMLInputElement).value)} />
          </Field>
          <div class="field submit">
            <button class="act primary" type="submit">
              Save
            </button>
          </div>
        </form>
      </Card>
    </>
  );
}

export function Keys() {
  const { rights } = useApp();
  const k = useLoad((signal) => (rights.can("keys") ? get<APIKey[]>("/v1/keys", { signal }) : Promise.resolve([])), []);
  const [error, setError] = useState<unknown>(null);
  const [made, setMade] = useState<CreatedAPIKey | null>(null);
  const [role, setRole] = useState<"viewer" | "member" | "admin">("viewer");
  const [name, setName] = useState("");
  const [tenant, setTenant] = useState("");
  if (!rights.can("keys")) return <Denied title="API keys" why={rights.lacks("keys", "see or make API keys")} />;
  return (
    <>
      <PageTitle>API keys</PageTitle>
      <Card>
        <ErrorText error={k.error || error} />
        {k.loading ? (
          <Loading />
        ) : (
          <Table
            id="keys"
            sortable
            rows={(k.data || []).filter((x) => !x.revoked_at)}
            rowKey={(x) => x.id}
            empty="no keys"
            cols={[
              { label: "key", sort: (x) => x.name || x.prefix, get: (x) => (x.name ? x.name + " (" + x.prefix + "…)" : x.prefix + "…") },
              { label: "role", sort: (x) => x.role || "", get: (x) => x.role || x.scopes.join(", ") },
              { label: "tenant", sort: (x) => x.tenant, get: (x) => x.tenant || "host" },
              { label: "made", cls: "hide-sm", get: (x) => <span title={when(x.created_at)}>{ago(x.created_at)}</span> },
              { label: "expires", get: (x) => (x.expires_at ? ago(x.expires_at) : "never") },
              {
                label: "",
                get: (x) =>
                  x.id === rights.who.key_id ? (
                    <span class="muted">this session</span>
                  ) : (
                    <Action label="Revoke" danger confirm="Really revoke?" run={async () => { await send("DELETE", "/v1/keys/" + enc(x.id)); k.reload(); }} onError={setError} />
                  ),
              },
            ]}
          />
        )}
      </Card>
      <Card title="Make a key">
        <form
          class="form-grid"
          onSubmit={async (e) => {
            e.preventDefault();
            setError(null);
            try {
              setMade(await send<CreatedAPIKey>("POST", "/v1/keys", { role, name: name || undefined, tenant: tenant || undefined }));
              k.reload();
            } catch (err) {
              setError(err);
            }
          }}
        >
          <Field label="Role" id="key-role">
            <select id="key-role" value={role} onChange={(e) => setRole((e.target as HTMLSelectElement).value as typeof role)}>
              <option value="viewer">viewer — reads</option>
              <option value="member">member — works with sandboxes</option>
              <option value="admin">admin — everything of its tenant</option>
            </select>
          </Field>
          <Field label="Name" id="key-name">
            <input id="key-name" type="text" value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
          </Field>
          {rights.host && (
            <Field label="Tenant" id="key-tenant" hint="empty: the host's">
              <input id="key-tenant" type="text" value={tenant} onInput={(e) => setTenant((e.target as HTMLInputElement).value)} />
            </Field>
          )}
          <div class="field submit">
            <button class="act primary" type="submit" id="key-create">
              Make key
            </button>
          </div>
        </form>
        {made && (
          <p role="status" id="key-made">
            The new key, shown once: <code class="secret">{made.key}</code>
          </p>
        )}
      </Card>
    </>
  );
}

function QuotaRow(props: { tenant: string }) {
  const q = useLoad((signal) => get<Quota>("/v1/tenants/" + enc(props.tenant) + "/quota", { signal }), [props.tenant]);
  if (!q.data) return <span class="muted">{q.error ? "—" : "…"}</span>;
  const x = q.data;
  const u = x.usage;
  const part = (used: string, max: number, f: (n: number) => string) => used + (max > 0 ? " of " + f(max) : "");
  return (
    <span>
      {u ? part(String(u.sandboxes), x.max_sandboxes, String) + " sandboxes, " + part(bytes(u.memory_bytes), x.max_memory_bytes, bytes) + " memory" : ""}
      {x.default ? " (default limits)" : ""}
    </span>
  );
}

export function Tenants() {
  const { rights } = useApp();
  const t = useLoad((signal) => (rights.host ? get<Tenant[]>("/v1/tenants", { signal }) : Promise.resolve([])), []);
  const [error, setError] = useState<unknown>(null);
  const [name, setName] = useState("");
  const [quota, setQuota] = useState<{ tenant: string; max_sandboxes: string; max_memory_gib: string } | null>(null);
  if (!rights.host) return <Denied title="Tenants" why="Tenants and their quotas are managed by the host’s administrator only." />;
  return (
    <>
      <PageTitle>Tenants</PageTitle>
      <Card>
        <ErrorText error={t.error || error} />
        {t.loading ? (
          <Loading />
        ) : (
          <Table
            id="tenants"
            rows={t.data || []}
            rowKey={(x) => x.name}
            empty="no tenants"
            cols={[
              { label: "tenant", get: (x) => x.name },
              { label: "made", get: (x) => ago(x.created_at) },
              { label: "usage", wrap: true, get: (x) => <QuotaRow tenant={x.name} /> },
              {
                label: "",
                get: (x) => (
                  <span class="row-actions">
                    <button type="button" class="act small" onClick={() => setQuota({ tenant: x.name, max_sandboxes: "", max_memory_gib: "" })}>
                      Quota…<span class="sr-only"> {x.name}</span>
                    </button>
                    <Action label="Delete" danger confirm="Really delete?" run={async () => { await send("DELETE", "/v1/tenants/" + enc(x.name)); t.reload(); }} onError={setError} />
                  </span>
                ),
              },
            ]}
          />
        )}
      </Card>
      {quota && (
        <Card title={"Quota of " + quota.tenant}>
          <form
            class="form-grid"
            onSubmit={async (e) => {
              e.preventDefault();
              try {
                await send("PUT", "/v1/tenants/" + enc(quota.tenant) + "/quota", {
                  max_sandboxes: Number(quota.max_sandboxes) || 0,
                  max_memory_bytes: Math.round((Number(quota.max_memory_gib) || 0) * 1024 ** 3),
                });
                setQuota(null);
                t.reload();
              } catch (err) {
                setError(err);
              }
            }}
          >
            <Field label="Most sandboxes at once" id="q-sb" hint="0: the default">
              <input id="q-sb" type="number" min="0" value={quota.max_sandboxes} onInput={(e) => setQuota({ ...quota, max_sandboxes: (e.target as HTMLInputElement).value })} />
            </Field>
            <Field label="Most memory (GiB)" id="q-mem" hint="0: the default">
              <input id="q-mem" type="number" min="0" step="0.5" value={quota.max_memory_gib} onInput={(e) => setQuota({ ...quota, max_memory_gib: (e.target as HTMLInputElement).value })} />
            </Field>
            <div class="field submit">
              <button class="act primary" type="submit">
                Save
              </button>
            </div>
          </form>
        </Card>
      )}
      <Card title="New tenant">
        <form
          class="row"
          onSubmit={async (e) => {
            e.preventDefault();
            try {
              await send("POST", "/v1/tenants", { name: name.trim() });
              setName("");
              t.reload();
            } catch (err) {
              setError(err);
            }
          }}
        >
          <label for="tenant-name">Name</label>
          <input id="tenant-name" type="text" required value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
          <button class="act primary" type="submit">
            Make tenant
          </button>
        </form>
      </Card>
    </>
  );
}

export function Denied(props: { title: string; why: string }) {
  return (
    <>
      <PageTitle>{props.title}</PageTitle>
      <Notice id="denied">{props.why}</Notice>
    </>
  );
}
