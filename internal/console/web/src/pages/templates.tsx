// Templates: the catalogue the caller sees, with their warm pools; for
// those holding the templates right, a template made three ways — pulled
// from a registry, uploaded as a docker-save or OCI archive, or built from
// a Dockerfile and its context — with the daemon's progress streamed live
// into a log (NDJSON: progress.ts).
import { useRef, useState } from "preact/hooks";
import { get, ndjson, send, words } from "../api";
import { useApp } from "../app";
import { Action, Card, ErrorText, Field, Loading, Notice, PageTitle, Table, useLoad } from "../components/ui";
import { ago, bytes } from "../format";
import { feed, startProgress, type Progress } from "../progress";
import { tar, type TarEntry } from "../tar";
import type { BuildEvent, ImportEvent, Template } from "../types";

const enc = encodeURIComponent;

type How = "registry" | "archive" | "dockerfile";
const hows: [How, string][] = [
  ["registry", "From a registry"],
  ["archive", "From an archive"],
  ["dockerfile", "From a Dockerfile"],
];

/** The query of a Dockerfile build, from the form's fields. */
export function dockerfileQuery(network: string, allow: string): string {
  const q = new URLSearchParams();
  q.set("network", network);
  if (network === "egress") for (const a of allow.split(/[\s,]+/).filter(Boolean)) q.append("allow", a);
  return q.toString();
}

/** The build context: the typed Dockerfile (if any) over the picked files, each at its path in the folder picked. */
export async function contextOf(dockerfile: string, files: { name: string; path?: string; bytes: () => Promise<Uint8Array> }[]): Promise<Uint8Array> {
  const entries: TarEntry[] = [];
  for (const f of files) {
    // A folder's files carry "folder/sub/file": the folder is the context.
    const rel = f.path && f.path.includes("/") ? f.path.slice(f.path.indexOf("/") + 1) : f.name;
    entries.push({ name: rel, data: await f.bytes() });
  }
  if (dockerfile.trim()) entries.push({ name: "Dockerfile", data: new TextEncoder().encode(dockerfile) });
  if (!entries.some((e) => e.name === "Dockerfile" || e.name === "./Dockerfile")) throw new Error("The context has no Dockerfile: type one or pick a file named Dockerfile.");
  return tar(entries);
}

function AddTemplate(props: { onDone: () => void }) {
  const [how, setHow] = useState<How>("dockerfile");
  const [name, setName] = useState("");
  const [ref, setRef] = useState("");
  const [insecure, setInsecure] = useState(false);
  const [dockerfile, setDockerfile] = useState("FROM base\nRUN echo hello from the build\n");
  const [network, setNetwork] = useState("none");
  const [allow, setAllow] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [prog, setProg] = useState<Progress | null>(null);
  const archive = useRef<HTMLInputElement>(null);
  const ctxFiles = useRef<HTMLInputElement>(null);
  const logRef = useRef<HTMLPreElement>(null);

  const submit = async (e: Event) => {
    e.preventDefault();
    setError(null);
    if (!name.trim()) {
      setError(new Error("Give the template a name."));
      return;
    }
    let p = startProgress();
    setProg(p);
    const onLine = (ev: ImportEvent | BuildEvent) => {
      p = feed(p, ev);
      setProg(p);
      const el = logRef.current;
      if (el) requestAnimationFrame(() => (el.scrollTop = el.scrollHeight));
    };
    setBusy(true);
    try {
      const n = enc(name.trim());
      if (how === "registry") {
        if (!ref.trim()) throw new Error("Give the image's reference, e.g. registry.example/app:1.");
        await ndjson<ImportEvent>("POST", "/v1/templates/import", { name: name.trim(), ref: ref.trim(), insecure }, onLine);
      } else if (how === "archive") {
        const f = archive.current?.files?.[0];
        if (!f) throw new Error("Pick a docker-save or OCI archive (.tar).");
        await ndjson<ImportEvent>("PUT", "/v1/templates/" + n + "/archive", f, onLine, { headers: { "Content-Type": "application/octet-stream" } });
      } else {
        const picked = [...(ctxFiles.current?.files || [])].map((f) => ({
          name: f.name,
          path: f.webkitRelativePath,
          bytes: async () => new Uint8Array(await f.arrayBuffer()),
        }));
        const body = await contextOf(dockerfile, picked);
        await ndjson<BuildEvent>("POST", "/v1/templates/" + n + "/dockerfile?" + dockerfileQuery(network, allow),
          new Blob([body as BlobPart], { type: "application/x-tar" }), onLine);
      }
      if (!p.error) props.onDone();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  const set = (f: (v: string) => void) => (e: Event) => f((e.target as HTMLInputElement).value);
  return (
    <Card title="Add a template" id="template-add">
      <form onSubmit={submit} id="template-form">
        <fieldset class="row how">
          <legend>How</legend>
          {hows.map(([h, label]) => (
            <label class="radio">
              <input type="radio" name="how" value={h} id={"how-" + h} checked={how === h} onChange={() => setHow(h)} /> {label}
            </label>
          ))}
        </fieldset>
        <div class="form-grid">
          <Field label="Template name" id="tpl-name" hint="Letters, digits, . _ -">
            <input id="tpl-name" type="text" required value={name} onInput={set(setName)} />
          </Field>
          {how === "registry" && (
            <>
              <Field label="Image reference" id="tpl-ref" hint="e.g. registry.example/team/app:1.2 (a tenant's key needs a daemon run with --tenant-pulls)">
                <input id="tpl-ref" type="text" value={ref} onInput={set(setRef)} />
              </Field>
              <label class="check">
                <input id="tpl-insecure" type="checkbox" checked={insecure} onChange={(e) => setInsecure((e.target as HTMLInputElement).checked)} /> Plain-HTTP registry
              </label>
            </>
          )}
          {how === "archive" && (
            <Field label="Archive (docker save, or an OCI archive)" id="tpl-archive">
              <input id="tpl-archive" type="file" ref={archive} accept=".tar,application/x-tar" />
            </Field>
          )}
          {how === "dockerfile" && (
            <>
              <Field label="Dockerfile" id="tpl-dockerfile" hint="Leave empty to use the Dockerfile among the files below. FROM names a template (base) or an image.">
                <textarea id="tpl-dockerfile" rows={6} spellcheck={false} value={dockerfile} onInput={set(setDockerfile)} />
              </Field>
              <Field label="Files of the build context (optional)" id="tpl-context" hint="What COPY and ADD read, at the context's top level.">
                <input id="tpl-context" type="file" multiple ref={ctxFiles} />
              </Field>
              <Field label="Network of the RUN steps" id="tpl-network">
                <select id="tpl-network" value={network} onChange={set(setNetwork)}>
                  <option value="none">none</option>
                  <option value="egress">egress, by the rules below</option>
                </select>
              </Field>
              {network === "egress" && (
                <Field label="Allow (host, *.domain, CIDR, :port; spaces between)" id="tpl-allow">
                  <input id="tpl-allow" type="text" value={allow} onInput={set(setAllow)} />
                </Field>
              )}
            </>
          )}
        </div>
        <button type="submit" class="act primary" id="tpl-submit" disabled={busy} aria-busy={busy}>
          {busy ? (how === "dockerfile" ? "Building…" : "Importing…") : how === "dockerfile" ? "Build" : "Import"}
        </button>
      </form>
      <ErrorText error={error} id="tpl-error" />
      {prog && (
        <figure class="build">
          <figcaption>Log</figcaption>
          <p id="build-status" role="status">
            {busy
              ? "Working… (the log follows the daemon)"
              : prog.error
                ? "Failed: " + prog.error
                : prog.template
                  ? `Made template ${prog.template.name} (${bytes(prog.template.size)}).`
                  : error
                    ? "Stopped: " + words(error)
                    : "Finished."}
          </p>
          <pre class="logs" id="build-log" tabIndex={0} ref={logRef} aria-label="Build and import log">
            {prog.lines.join("\n") || "(waiting for the daemon)"}
          </pre>
        </figure>
      )}
    </Card>
  );
}

export function Templates() {
  const { rights } = useApp();
  const t = useLoad((signal) => get<Template[]>("/v1/templates", { signal }), []);
  const [error, setError] = useState<unknown>(null);
  const [pool, setPool] = useState<{ name: string; min: string } | null>(null);
  const canManage = rights.can("templates");
  return (
    <>
      <PageTitle>Templates</PageTitle>
      {!canManage && <Notice id="templates-note">{rights.lacks("templates", "import or build templates, delete them or size their warm pools")}</Notice>}
      {canManage && <AddTemplate onDone={t.reload} />}
      <Card>
        <ErrorText error={t.error || error} />
        {t.loading ? (
          <Loading />
        ) : (
          <Table
            id="templates"
            sortable
            rows={t.data || []}
            rowKey={(x) => x.name}
            empty="no templates"
            cols={[
              { label: "template", sort: (x) => x.name, get: (x) => x.name },
              { label: "owner", get: (x) => x.tenant || "shared" },
              { label: "source", wrap: true, cls: "hide-sm", get: (x) => x.source },
              { label: "size", sort: (x) => x.size, get: (x) => bytes(x.size) },
              { label: "warm pool", get: (x) => (x.pool ? x.pool.ready + " ready of " + x.pool.min : "") },
              { label: "created", cls: "hide-sm", get: (x) => ("created_at" in x ? ago((x as { created_at?: string }).created_at) : "") },
              {
                label: "",
                get: (x) =>
                  canManage && !x.builtin ? (
                    <span class="row-actions">
                      <button type="button" class="act small" onClick={() => setPool({ name: x.name, min: String(x.pool?.min || 0) })}>
                        Pool…<span class="sr-only"> {x.name}</span>
                      </button>
                      <Action label="Delete" danger confirm="Really delete?" run={async () => { await send("DELETE", "/v1/templates/" + enc(x.name)); t.reload(); }} onError={setError} />
                    </span>
                  ) : (
                    ""
                  ),
              },
            ]}
          />
        )}
      </Card>
      {pool && (
        <Card title={"Warm pool of " + pool.name}>
          <form
            class="row"
            onSubmit={async (e) => {
              e.preventDefault();
              try {
                await send("PUT", "/v1/templates/" + enc(pool.name) + "/pool", { min: Number(pool.min) });
                setPool(null);
                t.reload();
              } catch (err) {
                setError(err);
              }
            }}
          >
            <label for="pool-min">Sandboxes kept started and ready</label>
            <input id="pool-min" type="number" min="0" value={pool.min} onInput={(e) => setPool({ ...pool, min: (e.target as HTMLInputElement).value })} />
            <button class="act primary" type="submit">
              Save
            </button>
          </form>
        </Card>
      )}
    </>
  );
}

