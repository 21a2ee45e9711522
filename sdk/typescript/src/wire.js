// The small readers of the API's streamed formats (NDJSON lines,
// Server-Sent Events) and the strict mode that checks answers against
// api/openapi.json (src/schemas.js, generated).
import { StringDecoder } from "node:string_decoder";

import { SCHEMAS } from "./schemas.js";

let strict = false;

/**
 * Strict mode makes every decoded answer be checked against the spec: a
 * key it does not list, or a required key that is absent, throws
 * SpecMismatch. Off for users (a newer daemon may add fields); the SDK's
 * own suite turns it on.
 */
export function setStrict(on) {
  strict = Boolean(on);
}

export class SpecMismatch extends Error {
  name = "SpecMismatch";
}

function checkValue(codec, v, where) {
  if (v === null || v === undefined || codec === null) return;
  if (Array.isArray(codec)) {
    const [kind, inner] = codec;
    if (kind === "list" && Array.isArray(v)) v.forEach((x, i) => checkValue(inner, x, `${where}[${i}]`));
    else if (kind === "map" && typeof v === "object") for (const [k, x] of Object.entries(v)) checkValue(inner, x, `${where}.${k}`);
    return;
  }
  check(codec, v, where);
}

/** Checks one decoded object against the model `name` (only in strict mode); returns it. */
export function check(name, v, where = name) {
  if (!strict) return v;
  const s = SCHEMAS[name];
  if (!s) throw new SpecMismatch(`no model ${name} in api/openapi.json`);
  if (v === null || typeof v !== "object" || Array.isArray(v)) {
    throw new SpecMismatch(`${where}: want a ${name} object, got ${JSON.stringify(v)}`);
  }
  const extra = Object.keys(v).filter((k) => !(k in s.props));
  const missing = s.required.filter((k) => !(k in v));
  if (extra.length || missing.length) {
    throw new SpecMismatch(
      `${where} (${name}): keys not in api/openapi.json ${JSON.stringify(extra)}, required keys absent ${JSON.stringify(missing)} in ${JSON.stringify(v)}`,
    );
  }
  for (const [k, codec] of Object.entries(s.props)) checkValue(codec, v[k], `${where}.${k}`);
  return v;
}

/** Checks every element of a list answer against the model `name`. */
export function checkList(name, list) {
  const items = list ?? [];
  items.forEach((x, i) => check(name, x, `${name}[${i}]`));
  return items;
}

/** Yields the lines of a byte stream (a node Readable), without their "\n" (and "\r"). */
export async function* lines(stream) {
  const dec = new StringDecoder("utf8");
  let buf = "";
  for await (const chunk of stream) {
    buf += dec.write(chunk);
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      yield buf.slice(0, i).replace(/\r$/, "");
      buf = buf.slice(i + 1);
    }
  }
  buf += dec.end();
  if (buf) yield buf.replace(/\r$/, "");
}

/**
 * Incremental reader of the text/event-stream format (the WHATWG rules the
 * Go client's readSSE follows): feed it lines, it returns the events they
 * complete as {id, event, data, retry}. The last id carries over to events
 * that name none, as the spec says.
 */
export class SSEParser {
  constructor() {
    this.lastId = "";
    this.#reset();
  }

  #reset() {
    this.event = "";
    this.data = [];
    this.hasData = false;
    this.retry = undefined;
  }

  feed(line) {
    if (line === "") {
      const out = this.hasData || this.retry !== undefined ? [{ id: this.lastId, event: this.event, data: this.data.join("\n"), retry: this.retry }] : [];
      this.#reset();
      return out;
    }
    if (line.startsWith(":")) return [];
    const i = line.indexOf(":");
    const field = i < 0 ? line : line.slice(0, i);
    let value = i < 0 ? "" : line.slice(i + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "id") {
      if (!value.includes("\0")) this.lastId = value;
    } else if (field === "event") {
      this.event = value;
    } else if (field === "data") {
      this.data.push(value);
      this.hasData = true;
    } else if (field === "retry" && /^[0-9]{1,9}$/.test(value)) {
      this.retry = Number(value);
    }
    return [];
  }
}
