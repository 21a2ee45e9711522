// The create form: the main options of POST /v1/sandboxes, in words and
// units a person uses (MiB, GiB, minutes), sent as the API's fields.
import { useState } from "preact/hooks";
import { get, send } from "../api";
import { Card, ErrorText, Field, useLoad } from "../components/ui";
import type { CreateSandboxRequest, Sandbox, Template } from "../types";

const lines = (s: string) => s.split(/[\n,]/).map((x) => x.trim()).filter(Boolean);

/** The request the form's values make; an error names the field in words. */
export function requestOf(v: Record<string, string | boolean>): CreateSandboxRequest {
  const req: CreateSandboxRequest = {};
  const num = (k: string, what: string) => {
    const s = String(v[k] || "").trim();
    if (!s) return undefined;
    const n = Number(s);
    if (!isFinite(n) || n <= 0) throw new Error(what + " must be a positive number");
    return n;
  };
  if (v.name) req.name = String(v.name).trim();
  if (v.template) req.template = String(v.template);
  const c = num("cpus", "CPUs"), m = num("memory", "Memory"), d = num("disk", "Disk");
  if (c || m || d) req.resources = { cpus: c, memory_bytes: m ? Math.round(m * 1024 * 1024) : undefined, disk_bytes: d ? Math.round(d * 1024 ** 3) : undefined };
  const t = num("timeout", "Timeout");
  if (t) req.timeout_seconds = Math.round(t * 60);
  if (v.persistent) req.persistent = true;
  const vol = num("volume", "Volume size");
  if (vol) {
    req.persistent = true;
    req.volume_size_bytes = Math.round(vol * 1024 ** 3);
  }
  if (v.network === "egress") req.network = "egress";
  const allow = lines(String(v.allow || ""));
  if (allow.length) {
    req.network = "egress";
    req.allow = allow;
  }
  const ports = lines(String(v.ports || "")).map((p) => {
    const n = Number(p);
    if (!Number.isInteger(n) || n < 1 || n > 65535) throw new Error("Ports must be numbers from 1 to 65535, not " + JSON.stringify(p));
    return n;
  });
  if (ports.length) req.public_ports = ports;
  const labels: Record<string, string> = {};
  for (const l of lines(String(v.labels || ""))) {
    const i = l.indexOf("=");
    if (i <= 0) throw new Error("Labels are key=value, not " + JSON.stringify(l));
    labels[l.slice(0, i).trim()] = l.slice(i + 1).trim();
  }
  if (Object.keys(labels).length) req.labels = labels;
  const secrets = lines(String(v.secrets || "")).map((l) => {
    const [name, env] = l.split("=").map((x) => x.trim());
    return env ? { name, env } : { name };
  });
  if (secrets.length) req.secrets = secrets;
  return req;
}

export function CreateForm(props: { onCreated: (sb: Sandbox) => void }) {
  const tpls = useLoad((signal) => get<Template[]>("/v1/templates", { signal }), []);
  const [v, setV] = useState<Record<string, string | boolean>>({ network: "none" });
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const set = (k: string) => (e: { target: EventTarget | null }) => {
    const el = e.target as HTMLInputElement;
    setV({ ...v, [k]: el.type === "checkbox" ? el.checked : el.value });
  };
  const input = (k: string, type: "text" | "number" = "text", extra: Record<string, string> = {}) => (
    <input id={"new-" + k} name={k} type={type as "text"} value={String(v[k] || "")} onInput={set(k)} {...extra} />
  );
  return (
    <Card title="New sandbox" id="create">
      <form
        id="create-form"
        class="form-grid"
        onSubmit={async (e) => {
          e.preventDefault();
          setError(null);
          setBusy(true);
          try {
            const sb = await send<Sandbox>("POST", "/v1/sandboxes", requestOf(v));
            props.onCreated(sb);
          } catch (err) {
            setError(err);
          } finally {
            setBusy(false);
          }
        }}
      >
        <Field label="Template" id="new-template">
          <select id="new-template" name="template" value={String(v.template || "")} onChange={set("template")}>
            <option value="">the default</option>
            {(tpls.data || []).map((t) => (
              <option value={t.name}>{t.name}</option>
            ))}
          </select>
        </Field>
        <Field label="Name" id="new-name" hint="optional; unique among yours">
          {input("name")}
        </Field>
        <Field label="CPUs" id="new-cpus" hint="default: the daemon's">
          {input("cpus", "number", { min: "0.1", step: "0.1" })}
        </Field>
        <Field label="Memory (MiB)" id="new-memory">
          {input("memory", "number", { min: "16", step: "1" })}
        </Field>
        <Field label="Disk (GiB)" id="new-disk">
          {input("disk", "number", { min: "0.1", step: "0.1" })}
        </Field>
        <Field label="Timeout (minutes)" id="new-timeout" hint="deleted after this long">
          {input("timeout", "number", { min: "1", step: "1" })}
        </Field>
        <div class="field check">
          <input id="new-persistent" name="persistent" type="checkbox" checked={!!v.persistent} onChange={set("persistent")} />
          <label for="new-persistent">Persistent (keeps a volume; can stop and start)</label>
        </div>
        <Field label="Volume size (GiB)" id="new-volume" hint="persistent sandboxes">
          {input("volume", "number", { min: "0.1", step: "0.1" })}
        </Field>
        <Field label="Network" id="new-network">
          <select id="new-network" name="network" value={String(v.network)} onChange={set("network")}>
            <option value="none">none (no network)</option>
            <option value="egress">egress (only what the rules allow)</option>
          </select>
        </Field>
        <Field label="Allow rules" id="new-allow" hint="one per line: a host, *.domain, an address or CIDR, with :port">
          <textarea id="new-allow" name="allow" rows={3} value={String(v.allow || "")} onInput={set("allow")} />
        </Field>
        <Field label="Public ports" id="new-ports" hint="comma-separated; reachable without a key">
          {input("ports")}
        </Field>
        <Field label="Labels" id="new-labels" hint="one key=value per line">
          <textarea id="new-labels" name="labels" rows={2} value={String(v.labels || "")} onInput={set("labels")} />
        </Field>
        <Field label="Secrets" id="new-secrets" hint="one per line: NAME or NAME=ENV_VAR">
          <textarea id="new-secrets" name="secrets" rows={2} value={String(v.secrets || "")} onInput={set("secrets")} />
        </Field>
        <div class="field submit">
          <button type="submit" class="act primary" id="create-submit" disabled={busy}>
            {busy ? "Creating…" : "Create"}
          </button>
        </div>
      </form>
      <ErrorText error={error} id="create-error" />
    </Card>
  );
}
