// The live log of a template import or build, from the NDJSON lines the
// API streams: an import's layer progress (api.ImportEvent: one line per
// layer, updated in place), a build's output (api.BuildEvent: base64
// chunks, a new line when the step changes), then the template or the
// error.
import type { BuildEvent, ImportEvent, Template } from "./types";
import { bytes } from "./format";

export type Progress = {
  lines: string[];
  layerLine: Record<number, number>; // layer → index in lines
  step: number;
  partial: boolean; // the last line is an unfinished output line
  template?: Template;
  error?: string;
};

export const startProgress = (): Progress => ({ lines: [], layerLine: {}, step: -1, partial: false });

function b64(s: string): string {
  const raw = atob(s);
  const u = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) u[i] = raw.charCodeAt(i);
  return new TextDecoder().decode(u);
}

/** p after one streamed line (ev); p itself is not changed. */
export function feed(p: Progress, ev: ImportEvent | BuildEvent): Progress {
  const n: Progress = { ...p, lines: [...p.lines], layerLine: { ...p.layerLine } };
  if ("progress" in ev && ev.progress) {
    const g = ev.progress;
    const what = g.cached
      ? "already stored"
      : g.done
        ? "done, " + bytes(g.bytes)
        : bytes(g.bytes) + (g.size ? " of " + bytes(g.size) : "");
    const line = `layer ${g.layer} of ${g.layers} (${(g.digest || "").replace(/^sha256:/, "").slice(0, 12)}): ${what}`;
    const at = n.layerLine[g.layer];
    if (at === undefined) {
      n.layerLine[g.layer] = n.lines.length;
      n.lines.push(line);
    } else n.lines[at] = line;
    n.partial = false;
  }
  if ("step" in ev && ev.data) {
    // The daemon heads each step itself ("--> [2/3] RUN ..."); a new
    // step starts a new line.
    if (ev.step !== n.step) {
      n.step = ev.step;
      n.partial = false;
    }
    const parts = b64(ev.data).replace(/\r\n?/g, "\n").split("\n");
    parts.forEach((part, i) => {
      if (i === 0 && n.partial) n.lines[n.lines.length - 1] += part;
      else n.lines.push(part);
    });
    // A chunk that ends with a newline leaves an empty, finished line.
    if (parts[parts.length - 1] === "") n.lines.pop();
    n.partial = parts[parts.length - 1] !== "";
  }
  if (ev.template) n.template = ev.template;
  if (ev.error) n.error = ev.error.message || ev.error.code;
  // A long build keeps its last 2000 lines.
  if (n.lines.length > 2000) {
    const drop = n.lines.length - 2000;
    n.lines = n.lines.slice(drop);
    for (const k of Object.keys(n.layerLine)) n.layerLine[Number(k)] -= drop;
  }
  return n;
}
