// The file browser: list a directory, go up and into directories, upload
// (button or drag and drop), download, edit a text file and save it.
import { useEffect, useState } from "preact/hooks";
import { blob, get, sbPath, send } from "../api";
import { bytes, when } from "../format";
import type { FileInfo } from "../types";
import { ErrorText, Table } from "./ui";

const join = (d: string, n: string) => (d.endsWith("/") ? d : d + "/") + n;
const MAX_EDIT = 1 << 20;

export function FileBrowser(props: { id: string; start: string }) {
  const [dir, setDir] = useState(props.start);
  const [typed, setTyped] = useState(props.start);
  const [files, setFiles] = useState<FileInfo[] | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [editing, setEditing] = useState<{ path: string; text: string } | null>(null);
  const [drag, setDrag] = useState(false);
  const base = sbPath(props.id) + "/files";
  const load = async (d: string) => {
    setError(null);
    try {
      const fis = (await get<FileInfo[]>(base + "/list?path=" + encodeURIComponent(d))) || [];
      fis.sort((a, b) => Number(b.is_dir) - Number(a.is_dir) || (a.name < b.name ? -1 : 1));
      setDir(d);
      setTyped(d);
      setFiles(fis);
    } catch (e) {
      setError(e);
    }
  };
  useEffect(() => {
    load(props.start);
  }, [props.id]);
  const upload = async (list: FileList | File[]) => {
    for (const f of Array.from(list)) {
      try {
        await send("PUT", base + "?path=" + encodeURIComponent(join(dir, f.name)), f, { headers: { "Content-Type": "application/octet-stream" } });
      } catch (e) {
        setError(new Error(f.name + ": " + ((e as Error).message || e)));
      }
    }
    load(dir);
  };
  const download = async (p: string, name: string) => {
    try {
      const url = URL.createObjectURL(await blob(base + "?path=" + encodeURIComponent(p)));
      const a = document.createElement("a");
      a.href = url;
      a.download = name;
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (e) {
      setError(e);
    }
  };
  const edit = async (f: FileInfo) => {
    setError(null);
    if (f.size > MAX_EDIT) {
      setError(new Error(f.name + " is " + bytes(f.size) + ": only files up to 1 MiB are edited here; download it instead."));
      return;
    }
    try {
      const b = await blob(base + "?path=" + encodeURIComponent(join(dir, f.name)));
      setEditing({ path: join(dir, f.name), text: await b.text() });
    } catch (e) {
      setError(e);
    }
  };
  const up = dir.replace(/\/+$/, "").replace(/\/[^/]*$/, "") || "/";
  return (
    <div
      class={"files" + (drag ? " dragging" : "")}
      onDragOver={(e) => {
        e.preventDefault();
        setDrag(true);
      }}
      onDragLeave={() => setDrag(false)}
      onDrop={(e) => {
        e.preventDefault();
        setDrag(false);
        if (e.dataTransfer?.files.length) upload(e.dataTransfer.files);
      }}
    >
      <form
        class="row"
        onSubmit={(e) => {
          e.preventDefault();
          load(typed.trim() || "/");
        }}
      >
        <label class="sr-only" for="files-path">
          Directory
        </label>
        <input type="text" id="files-path" value={typed} onInput={(e) => setTyped((e.target as HTMLInputElement).value)} />
        <button class="act" type="submit">
          Open
        </button>
        <label class="act upload" for="files-upload">
          Upload…
        </label>
        <input
          type="file"
          id="files-upload"
          class="sr-only"
          multiple
          onChange={(e) => {
            const el = e.target as HTMLInputElement;
            if (el.files) upload(el.files).then(() => (el.value = ""));
          }}
        />
        <span class="muted hide-sm">or drop files here</span>
      </form>
      <ErrorText error={error} id="files-msg" />
      {dir !== "/" && (
        <p>
          <a
            href="#"
            class="up"
            onClick={(e) => {
              e.preventDefault();
              load(up);
            }}
          >
            ↑ {up}
          </a>
        </p>
      )}
      {files && (
        <Table
          id="file-list"
          caption={"Files in " + dir}
          rows={files}
          rowKey={(f) => f.name}
          empty="empty directory"
          cols={[
            {
              label: "name",
              wrap: true,
              get: (f) =>
                f.is_dir ? (
                  <a
                    href="#"
                    class="dir"
                    onClick={(e) => {
                      e.preventDefault();
                      load(join(dir, f.name));
                    }}
                  >
                    {f.name}/
                  </a>
                ) : (
                  <span class="fname">{f.name}</span>
                ),
            },
            { label: "size", get: (f) => (f.is_dir ? "" : bytes(f.size)) },
            { label: "mode", cls: "hide-sm", get: (f) => f.mode_string },
            { label: "modified", cls: "hide-sm", get: (f) => when(f.mod_time) },
            {
              label: "",
              get: (f) =>
                f.is_dir ? (
                  ""
                ) : (
                  <span class="row-actions">
                    <button class="act download" type="button" data-name={f.name} onClick={() => download(join(dir, f.name), f.name)}>
                      Download<span class="sr-only"> {f.name}</span>
                    </button>
                    <button class="act edit" type="button" data-name={f.name} onClick={() => edit(f)}>
                      Edit<span class="sr-only"> {f.name}</span>
                    </button>
                  </span>
                ),
            },
          ]}
        />
      )}
      {editing && (
        <form
          id="editor"
          onSubmit={async (e) => {
            e.preventDefault();
            try {
              await send("PUT", base + "?path=" + encodeURIComponent(editing.path), new Blob([editing.text]), {
                headers: { "Content-Type": "application/octet-stream" },
              });
              setEditing(null);
              load(dir);
            } catch (err) {
              setError(err);
            }
          }}
        >
          <label for="editor-text">Editing {editing.path}</label>
          <textarea id="editor-text" rows={12} spellcheck={false} value={editing.text} onInput={(e) => setEditing({ ...editing, text: (e.target as HTMLTextAreaElement).value })} />
          <p>
            <button class="act primary" type="submit" id="editor-save">
              Save
            </button>
            <button class="act" type="button" onClick={() => setEditing(null)}>
              Cancel
            </button>
          </p>
        </form>
      )}
    </div>
  );
}
