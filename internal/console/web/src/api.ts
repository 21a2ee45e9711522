// The console's API client: fetch with the tab's key in the Authorization
// header (never in a URL), typed by the OpenAPI models (types.ts). Errors
// become ApiError, whose words() is a sentence for a person, not a code.
import type { Event, WhoAmI } from "./types";

const KEY = "berth.key";
const SESSION = "berth.session"; // key id of a key from a sign-in code

export const session = {
  key: (): string => sessionStorage.getItem(KEY) || "",
  sessionKeyID: (): string => sessionStorage.getItem(SESSION) || "",
  set(key: string, keyID?: string) {
    sessionStorage.setItem(KEY, key);
    if (keyID) sessionStorage.setItem(SESSION, keyID);
  },
  clear() {
    sessionStorage.removeItem(KEY);
    sessionStorage.removeItem(SESSION);
  },
};

/** Called when the daemon says the key no longer works (401). */
let onUnauthenticated: (why: string) => void = () => {};
export function whenUnauthenticated(f: (why: string) => void) {
  onUnauthenticated = f;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
  /** A sentence for a person: what went wrong and, where it helps, why. */
  words(): string {
    switch (this.code) {
      case "permission_denied":
        return "Your key is not allowed to do this. " + this.message + ".";
      case "unauthenticated":
        return "The key was not accepted (revoked, expired or mistyped).";
      case "not_found":
        return "Not found: " + this.message + ".";
      case "conflict":
        return "Not possible now: " + this.message + ".";
      case "resource_exhausted":
      case "limit_exceeded":
        return "A limit was reached: " + this.message + ".";
      case "invalid_argument":
        return "Not valid: " + this.message + ".";
      case "not_supported":
        return "Not supported here: " + this.message + ".";
      case "network":
        return "The daemon could not be reached.";
    }
    return this.message || "HTTP " + this.status;
  }
}

/** The words of any error: an ApiError's sentence, else its message. */
export function words(e: unknown): string {
  if (e instanceof ApiError) return e.words();
  if (e instanceof Error) return e.message;
  return String(e);
}

type Opts = { body?: unknown; headers?: Record<string, string>; signal?: AbortSignal; noSignout?: boolean };

async function request(method: string, path: string, opts: Opts = {}): Promise<Response> {
  const headers: Record<string, string> = { Authorization: "Bearer " + session.key(), ...(opts.headers || {}) };
  let body: BodyInit | undefined;
  if (opts.body instanceof Blob || typeof opts.body === "string") body = opts.body;
  else if (opts.body !== undefined) {
    body = JSON.stringify(opts.body);
    headers["Content-Type"] = "application/json";
  }
  let r: Response;
  try {
    r = await fetch(path, { method, headers, body, cache: "no-store", signal: opts.signal });
  } catch (e) {
    if (opts.signal?.aborted) throw e;
    throw new ApiError(0, "network", String(e));
  }
  if (!r.ok) {
    let code = "http_" + r.status;
    let msg = r.statusText;
    try {
      const e = (await r.json()).error;
      code = e.code;
      msg = e.message;
    } catch {
      /* not JSON */
    }
    if (r.status === 401 && !opts.noSignout) onUnauthenticated("The session ended: " + msg);
    throw new ApiError(r.status, code, msg);
  }
  return r;
}

export async function get<T>(path: string, opts: Opts = {}): Promise<T> {
  return (await request("GET", path, opts)).json();
}
export async function text(path: string, opts: Opts = {}): Promise<string> {
  return (await request("GET", path, opts)).text();
}
export async function send<T = unknown>(method: string, path: string, body?: unknown, opts: Opts = {}): Promise<T> {
  const r = await request(method, path, { ...opts, body });
  const ct = r.headers.get("Content-Type") || "";
  return (ct.includes("json") ? r.json() : r.text()) as Promise<T>;
}
export async function blob(path: string): Promise<Blob> {
  return (await request("GET", path)).blob();
}

/** Every page of a list route, following berth-next-cursor. */
export async function pages<T>(path: string, signal?: AbortSignal, limit = 200): Promise<T[]> {
  const out: T[] = [];
  let cursor = "";
  for (let i = 0; i < 1000; i++) {
    const sep = path.includes("?") ? "&" : "?";
    const r = await request("GET", path + sep + "limit=" + limit + (cursor ? "&cursor=" + encodeURIComponent(cursor) : ""), {
      signal,
    });
    out.push(...((await r.json()) as T[]));
    cursor = r.headers.get("berth-next-cursor") || "";
    if (!cursor) break;
  }
  return out;
}

export const sbPath = (id: string) => "/v1/sandboxes/" + encodeURIComponent(id);

export const whoami = (opts: Opts = {}) => get<WhoAmI>("/v1/whoami", opts);

/**
 * Reads a Server-Sent Events stream with fetch (EventSource cannot send
 * the Authorization header), resuming from the last event id after a
 * cut. Resolves when signal aborts.
 */
export async function stream(path: string, onEvent: (e: Event) => void, signal: AbortSignal, onState: (up: boolean) => void,
  after = 0) {
  let last = after ? String(after) : "";
  while (!signal.aborted) {
    try {
      const headers: Record<string, string> = { Accept: "text/event-stream", Authorization: "Bearer " + session.key() };
      if (last) headers["Last-Event-ID"] = last;
      const r = await fetch(path, { headers, signal, cache: "no-store" });
      if (r.status === 401) {
        onUnauthenticated("The session ended.");
        return;
      }
      if (!r.ok || !(r.headers.get("Content-Type") || "").startsWith("text/event-stream") || !r.body) {
        throw new Error("event stream: HTTP " + r.status);
      }
      onState(true);
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value.replace(/\r\n?/g, "\n");
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const frame = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const data: string[] = [];
          let id = "";
          for (const line of frame.split("\n")) {
            if (line.startsWith(":")) continue;
            const c = line.indexOf(":");
            const f = c < 0 ? line : line.slice(0, c);
            const v = c < 0 ? "" : line.slice(c + 1).replace(/^ /, "");
            if (f === "data") data.push(v);
            else if (f === "id") id = v;
          }
          if (id) last = id;
          if (data.length) {
            try {
              onEvent(JSON.parse(data.join("\n")));
            } catch (e) {
              console.warn("bad event frame", e);
            }
          }
        }
      }
    } catch {
      if (signal.aborted) return;
    }
    if (signal.aborted) return;
    onState(false);
    await new Promise((res) => setTimeout(res, 2000));
  }
}

/**
 * Sends a request whose answer is an NDJSON stream (a template import or
 * build) and calls onLine with each parsed line as it arrives. An error
 * before the stream starts is an ApiError, as for any request.
 */
export async function ndjson<T>(method: string, path: string, body: unknown, onLine: (v: T) => void,
  opts: Opts = {}): Promise<void> {
  const r = await request(method, path, { ...opts, body, headers: { Accept: "application/x-ndjson", ...(opts.headers || {}) } });
  if (!r.body) return;
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  const emit = (line: string) => {
    if (line.trim()) onLine(JSON.parse(line) as T);
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      emit(buf.slice(0, i));
      buf = buf.slice(i + 1);
    }
  }
  emit(buf);
}
