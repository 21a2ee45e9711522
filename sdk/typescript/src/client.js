// The client of berth's HTTP API: Client, Sandbox and the groups of calls
// (client.sandboxes, sandbox.files, ...), the same shape as the Python
// SDK's (sdk/python/berth/_async_client.py). Durations are seconds, as in
// the API; output and file contents are Buffers (Uint8Array).
import "./dispose.js";

import http from "node:http";
import https from "node:https";

import {
  FILE_MODE_HEADER,
  IDEMPOTENCY_HEADER,
  NEXT_CURSOR_HEADER,
  SAFE_METHODS,
  SANDBOX_ID_HEADER,
  backoff,
  newIdempotencyKey,
  resolve,
  retryDelay,
} from "./conn.js";
import { APIError, BerthError, ConnectError, RequestTimeoutError, StreamError, TransportError, fromResponse, fromStream } from "./errors.js";
import { Pty } from "./pty.js";
import { SSEParser, check, checkList, lines } from "./wire.js";

const seg = (s) => encodeURIComponent(String(s));
const argv = (cmd) => (typeof cmd === "string" ? ["sh", "-c", cmd] : [...cmd]);
const bool = (v) => (v ? "true" : undefined);
const b64 = (v) => (v === undefined || v === null ? undefined : Buffer.from(v).toString("base64"));
const defaultSleep = (s) => new Promise((r) => setTimeout(r, s * 1000));

/** Seconds a short call may go without progress (Client's `timeout`). */
export const DEFAULT_TIMEOUT = 60;

// TLS verification failures (node's codes, from OpenSSL's names).
const TLS_VERIFY = /CERT|SELF_SIGNED|UNABLE_TO_VERIFY|ERR_TLS_CERT_ALTNAME_INVALID/;

// Connection errors that mean nothing answered at all.
const REFUSED = new Set(["ECONNREFUSED", "ENOENT", "EACCES", "EHOSTUNREACH", "ENETUNREACH", "EADDRNOTAVAIL"]);

/** A finished command: its exit status and all of its output. */
export class ExecResult {
  constructor(exit, stdout, stderr, sandboxId = "") {
    this.exit = exit;
    this.stdout = stdout;
    this.stderr = stderr;
    /** The one-shot sandbox of a client.run ("" for an exec). */
    this.sandboxId = sandboxId;
  }

  get exitCode() {
    return this.exit.code;
  }

  /** stdout decoded as UTF-8. */
  get text() {
    return this.stdout.toString("utf8");
  }
}

/**
 * The items of a paged list, fetched page by page as they are iterated
 * (`for await (const sb of client.sandboxes.list())`), or all at once with
 * toArray().
 */
export class PageIterator {
  constructor(fetchPage, map) {
    this._fetch = fetchPage;
    this._map = map;
  }

  async *[Symbol.asyncIterator]() {
    let cursor = "";
    for (;;) {
      const { items, nextCursor } = await this._fetch(cursor);
      for (const x of items) yield this._map(x);
      if (!nextCursor) return;
      if (nextCursor === cursor) throw new StreamError(`the server repeated cursor ${JSON.stringify(cursor)}`);
      cursor = nextCursor;
    }
  }

  async toArray() {
    const out = [];
    for await (const x of this) out.push(x);
    return out;
  }
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params ?? {})) {
    if (v === undefined || v === null || v === "") continue;
    for (const x of Array.isArray(v) ? v : [v]) q.append(k, String(x));
  }
  const s = q.toString();
  return s ? "?" + s : "";
}

/**
 * A client of one berth daemon.
 *
 * `host` is unix:///path/to/berth.sock, http://host:port or
 * https://host:port (default: BERTH_HOST, else the daemon's default
 * socket); `apiKey` defaults to BERTH_API_KEY; `tlsFingerprint` (default
 * BERTH_TLS_FINGERPRINT) pins an https daemon's certificate, `tlsCa`
 * verifies it against a CA file instead. Without a host (nor BERTH_HOST),
 * `context` (default BERTH_CONTEXT, else the CLI's current context) names a
 * context saved by `berth context add`: its host, key and TLS settings. Calls refused with 429 or 503 are
 * retried up to `maxRetries` times, waiting what Retry-After says (at most
 * `maxRetryWait` seconds), else a short backoff.
 *
 * Timeouts are per route, in seconds without progress on the connection
 * (not in total): `timeout` (default 60) bounds short calls, answered once
 * the daemon has done a bounded piece of work; `streamTimeout` (default
 * none) the long-running ones, whose answer lasts as long as the work asked
 * for: exec and run streams, process waits and followed logs, watches,
 * event streams, template builds, imports, uploads, pushes and apply,
 * copies, exports and tar transfers, snapshots, forks, hibernate, wake,
 * restore, and creates that pull an `image`. A stop's `timeout` (its grace)
 * is added to its bound. `withOptions({ timeout })` gives a client for one
 * call or a few with other bounds. A call past its bound rejects with
 * RequestTimeoutError.
 */
export class Client {
  constructor(options = {}) {
    this._conn = resolve(options);
    this.host = this._conn.host;
    this.maxRetries = options.maxRetries ?? 4;
    this.maxRetryWait = options.maxRetryWait ?? 30;
    this.timeout = options.timeout === undefined ? DEFAULT_TIMEOUT : options.timeout;
    this.streamTimeout = options.streamTimeout;
    this._sleep = options.sleep ?? defaultSleep;
    this._headers = { "User-Agent": options.userAgent ?? "berth-typescript" };
    if (this._conn.apiKey) this._headers.Authorization = "Bearer " + this._conn.apiKey;
    this._groups();
  }

  _groups() {
    this.sandboxes = new Sandboxes(this);
    this.snapshots = new Snapshots(this);
    this.templates = new Templates(this);
    this.volumes = new Volumes(this);
    this.secrets = new Secrets(this);
    this.events = new Events(this);
    this.audit = new Audit(this);
    this.keys = new Keys(this);
    this.tenants = new Tenants(this);
    this.quotas = new Quotas(this);
  }

  /**
   * A client like this one with other bounds (`timeout`, `streamTimeout`,
   * `maxRetries`) for the calls made through it
   * (`client.withOptions({ timeout: 5 }).sandboxes.get(id)`); it shares this
   * client's connections, so closing either closes both.
   */
  withOptions(options = {}) {
    const c = Object.assign(Object.create(Object.getPrototypeOf(this)), this);
    for (const k of ["timeout", "streamTimeout", "maxRetries"]) if (k in options) c[k] = options[k];
    c._groups();
    return c;
  }

  _bound(long, extra = 0) {
    const t = long ? this.streamTimeout : this.timeout;
    return t ? t + extra : undefined;
  }

  /** Closes the idle connections. */
  close() {
    this._conn.agent.destroy();
  }

  async [Symbol.asyncDispose]() {
    this.close();
  }

  // -- transport ---------------------------------------------------------

  // One attempt: resolves with the response (its body unread), rejects
  // with the connection's error.
  // `timeout`: seconds without progress before the request is destroyed
  // (undefined: no bound).
  _once(method, path, headers, body, timeout) {
    const c = this._conn;
    const opts = { method, path: c.prefix + path, headers, agent: c.agent };
    if (c.socketPath) opts.socketPath = c.socketPath;
    else {
      opts.host = c.hostname;
      opts.port = c.port;
    }
    if (timeout) opts.timeout = timeout * 1000;
    return new Promise((resolve, reject) => {
      const req = (c.secure ? https : http).request(opts);
      req.once("response", resolve);
      req.once("error", (err) => {
        err.reusedSocket = req.reusedSocket;
        reject(err);
      });
      req.once("timeout", () => {
        // Also once the answer has begun: its body then breaks off, and
        // readers look at this mark to say why.
        req.timedOut = true;
        req.destroy(Object.assign(new Error("timed out"), { code: "ETIMEDOUT" }));
      });
      if (body !== undefined && !(body instanceof Uint8Array) && typeof body[Symbol.asyncIterator] === "function") {
        // A stream (a node Readable, a web ReadableStream, an async
        // generator): written as it comes, chunked, with backpressure.
        (async () => {
          for await (const chunk of body) {
            if (req.destroyed) return;
            if (!req.write(typeof chunk === "string" ? chunk : Buffer.from(chunk))) {
              await new Promise((r) => {
                req.once("drain", r);
                req.once("close", r);
              });
            }
          }
          req.end();
        })().catch((err) => req.destroy(err));
        return;
      }
      req.end(body);
    });
  }

  /**
   * Sends one request with the retry policy (see conn.js); resolves with a
   * 2xx response whose body is unread (stream) or read into `.body`, or
   * rejects with an APIError.
   */
  async _send(method, path, { params, body, bodyStream, headers, idempotencyKey, stream = false, long = false, extraTimeout = 0 } = {}) {
    const h = { ...this._headers, ...headers };
    let content;
    if (bodyStream !== undefined) {
      // Read once: such a request is never sent twice.
      content = bodyStream;
      h["Content-Type"] ??= "application/octet-stream";
    } else if (body instanceof Uint8Array || typeof body === "string") {
      content = typeof body === "string" ? Buffer.from(body) : body;
      h["Content-Type"] ??= "application/octet-stream";
    } else if (body !== undefined) {
      content = Buffer.from(JSON.stringify(body));
      h["Content-Type"] = "application/json";
    }
    if (content !== undefined && bodyStream === undefined) h["Content-Length"] = String(content.length);
    if (idempotencyKey) h[IDEMPOTENCY_HEADER] = idempotencyKey;
    const url = path + query(params);
    // Sending twice is safe for these; for others only a refusal is retried.
    const replayable = (SAFE_METHODS.has(method) || Boolean(idempotencyKey)) && bodyStream === undefined;
    for (let attempt = 0; ; attempt++) {
      let res;
      try {
        res = await this._once(method, url, h, content, this._bound(long, extraTimeout));
      } catch (err) {
        if (err instanceof BerthError) throw err; // the pin did not match
        if (err.code === "ETIMEDOUT") throw new RequestTimeoutError(`${method} ${path}: no answer within the call's timeout`, err);
        // A certificate that fails verification fails every attempt alike;
        // nothing was sent.
        if (REFUSED.has(err.code) || TLS_VERIFY.test(err.code ?? "")) {
          // Refused at the first attempt: no daemon, say so at once. A
          // daemon that went away since an earlier attempt may be restarting.
          if (attempt === 0 || attempt >= this.maxRetries || !REFUSED.has(err.code)) throw new ConnectError(this.host, err);
          await this._sleep(backoff(attempt));
          continue;
        }
        // Cut before an answer came: the request may or may not have been
        // done, so only one safe to send twice is sent again — or any
        // request whose kept-alive connection the server had closed.
        if ((!replayable && !(err.reusedSocket && bodyStream === undefined)) || attempt >= this.maxRetries) {
          throw new TransportError(`${method} ${path}: ${err.message || err.code}`, err);
        }
        await this._sleep(backoff(attempt));
        continue;
      }
      if (res.statusCode >= 200 && res.statusCode < 300) {
        if (!stream) {
          try {
            res.body = await readAll(res);
          } catch (err) {
            if (res.req?.timedOut) throw new RequestTimeoutError(`${method} ${path}: the answer stalled past the call's timeout`, err);
            throw new TransportError(`${method} ${path}: the answer broke off: ${err.message || err.code}`, err);
          }
        }
        return res;
      }
      const raw = await readAll(res).catch(() => Buffer.alloc(0));
      const err = fromResponse(res.statusCode, res.statusMessage, res.headers, raw);
      const delay = attempt < this.maxRetries && bodyStream === undefined ? retryDelay(err, attempt, this.maxRetryWait) : undefined;
      if (delay === undefined) throw err;
      await this._sleep(delay);
    }
  }

  async _json(method, path, opts) {
    const res = await this._send(method, path, opts);
    if (res.statusCode === 204 || res.body.length === 0) return undefined;
    return JSON.parse(res.body.toString("utf8"));
  }

  async _page(path, params, limit, cursor) {
    const res = await this._send("GET", path, { params: { ...params, limit, cursor: cursor || undefined } });
    const items = res.body.length ? JSON.parse(res.body.toString("utf8")) : [];
    return { items: items ?? [], nextCursor: String(res.headers[NEXT_CURSOR_HEADER] ?? "") };
  }

  _list(path, params, model, map = (x) => x) {
    return new PageIterator(async (cursor) => {
      const p = await this._page(path, params, undefined, cursor);
      checkList(model, p.items);
      return p;
    }, map);
  }

  async _listPage(path, params, model, { limit, cursor } = {}, map = (x) => x) {
    const p = await this._page(path, params, limit, cursor);
    return { items: checkList(model, p.items).map(map), nextCursor: p.nextCursor };
  }

  // The JSON values of an NDJSON stream; a connection that breaks in the
  // middle is a StreamError.
  async *_ndjson(res) {
    try {
      const it = lines(res)[Symbol.asyncIterator]();
      for (;;) {
        let r;
        try {
          r = await it.next();
        } catch (err) {
          if (res.req?.timedOut) throw new RequestTimeoutError("the stream stalled past the call's timeout", err);
          throw new StreamError(`the stream broke: ${err.message || err.code}`, err);
        }
        if (r.done) return;
        if (r.value.trim()) yield JSON.parse(r.value);
      }
    } finally {
      res.destroy();
    }
  }

  // The ExecEvents of an exec or run stream, output decoded to Buffers.
  async *_execEvents(res, model = "ExecEvent") {
    for await (const d of this._ndjson(res)) {
      check(model, d);
      if (d.error) throw fromStream(d.error);
      yield { ...d, data: d.data === undefined ? undefined : Buffer.from(d.data, "base64") };
      if (d.exit) return;
    }
    throw new StreamError("the exec stream ended without an exit status");
  }

  // -- system ------------------------------------------------------------

  /** True when the daemon answers /healthz. */
  async health() {
    await this._send("GET", "/healthz");
    return true;
  }

  async version() {
    return check("Version", await this._json("GET", "/v1/version"));
  }

  /**
   * The credential this client uses, as the daemon sees it: actor, tenant,
   * scopes, the narrowest role holding them, and whether it is the host's
   * administrator (never the key itself).
   */
  async whoami() {
    return check("WhoAmI", await this._json("GET", "/v1/whoami"));
  }

  /** The daemon's metrics in the Prometheus text format (GET /metrics; the host's administrator only). */
  async metrics() {
    return (await this._send("GET", "/metrics")).body.toString("utf8");
  }

  /** The daemon's OpenAPI document (GET /v1/openapi.json): the API it serves, for tools that read it. */
  async openapi() {
    return this._json("GET", "/v1/openapi.json");
  }

  async doctor({ fix = false } = {}) {
    return check("DoctorReport", await this._json(fix ? "POST" : "GET", fix ? "/v1/doctor/fix" : "/v1/doctor"));
  }

  /**
   * Runs one command in a one-shot sandbox (POST /v1/run) that the daemon
   * destroys when the command ends: create, exec and delete in one round
   * trip. Not retried on a cut connection (the command may have run).
   */
  async run(cmd, { sandbox = {}, stdin, env, timeout } = {}) {
    const req = { sandbox, exec: { cmd: argv(cmd), stdin: b64(stdin), env, timeout_seconds: timeout } };
    const res = await this._send("POST", "/v1/run", { body: req, headers: { Accept: "application/x-ndjson" }, stream: true, long: true });
    return collect(this._execEvents(res), String(res.headers[SANDBOX_ID_HEADER] ?? ""));
  }

  /**
   * Builds a declarative template: `spec` is the template file (YAML or
   * JSON), `files` a tar of the local files its copy steps name. Only steps
   * whose inputs changed are built again.
   */
  async apply(spec, { files, onOutput } = {}) {
    const res = await this._send("POST", "/v1/apply", {
      body: { spec, files: b64(files) },
      headers: { Accept: "application/x-ndjson" },
      stream: true,
      long: true,
    });
    return this._buildStream(res, onOutput);
  }

  // The NDJSON stream of a build, import or push: every line checked
  // against model (if given), an error line thrown (naming its build step
  // if it has one), every other line to each, whose first result other
  // than undefined ends the stream; one that ends without a result throws
  // StreamError(unended).
  async _resultStream(res, unended, each, model) {
    for await (const d of this._ndjson(res)) {
      if (model) check(model, d);
      if (d.error) {
        const err = fromStream(d.error);
        if (d.step) err.message = `step ${d.step}: ${err.message}`;
        throw err;
      }
      const r = each(d);
      if (r !== undefined) return r;
    }
    throw new StreamError(unended);
  }

  // The BuildEvents of a build, Dockerfile build or apply: output to
  // onOutput (data as a Buffer), then the template or the failing step's error.
  _buildStream(res, onOutput) {
    return this._resultStream(
      res,
      "the build stream ended without a template",
      (d) => {
        if (d.template) return d.template;
        if (d.data) onOutput?.({ ...d, data: Buffer.from(d.data, "base64") });
        return undefined;
      },
      "BuildEvent",
    );
  }

  /**
   * Copies a file or directory from one sandbox to another (docker cp's
   * rules), without the bytes passing through this client.
   */
  async copy(fromSandbox, fromPath, toSandbox, toPath, { preserveOwner = false } = {}) {
    await this._send("POST", "/v1/copy", {
      body: { from: fromSandbox, from_path: fromPath, to: toSandbox, to_path: toPath, preserve_owner: preserveOwner || undefined },
      long: true,
    });
  }

  /** Every template's warm pool. */
  async pools() {
    return checkList("Pool", await this._json("GET", "/v1/pools"));
  }

  /**
   * The webhook endpoints the daemon posts lifecycle events to (`berth
   * serve --webhook-url`; the host's administrator only): each URL with its
   * user, password and query values redacted, whether deliveries are
   * signed (never the secret) and this daemon's recent delivery attempts,
   * newest first. Empty when none is configured.
   */
  async webhooks() {
    return checkList("Webhook", await this._json("GET", "/v1/webhooks"));
  }
}

async function readAll(res) {
  const chunks = [];
  for await (const c of res) chunks.push(c);
  return Buffer.concat(chunks);
}

async function collect(events, sandboxId = "", onStdout, onStderr) {
  const out = [];
  const err = [];
  for await (const ev of events) {
    if (ev.exit) return new ExecResult(ev.exit, Buffer.concat(out), Buffer.concat(err), sandboxId);
    if (ev.data?.length) {
      if (ev.stream === "stderr") {
        err.push(ev.data);
        onStderr?.(ev.data);
      } else {
        out.push(ev.data);
        onStdout?.(ev.data);
      }
    }
  }
  throw new StreamError("the exec stream ended without an exit status");
}

/**
 * One sandbox: its last known state in `info` (a models.Sandbox) and the
 * calls on it. `await using sb = await client.sandboxes.create()` deletes
 * it when the block ends, whether or not the block threw.
 */
export class Sandbox {
  constructor(client, info) {
    this._c = client;
    this.info = info;
    this.id = info.id;
    this.files = new Files(client, this.id);
    this.processes = new Processes(client, this.id);
    this.network = new Network(client, this.id);
  }

  get state() {
    return this.info.state;
  }

  /** Deletes the sandbox (forced); a sandbox already gone is no error. */
  async [Symbol.asyncDispose]() {
    try {
      await this.delete({ force: true });
    } catch (e) {
      if (!(e instanceof APIError && e.status === 404)) throw e;
    }
  }

  _path(...rest) {
    return "/v1/sandboxes/" + seg(this.id) + rest.map((r) => "/" + r).join("");
  }

  async _verb(verb, params, { long = false, extraTimeout = 0 } = {}) {
    this.info = check("Sandbox", await this._c._json("POST", this._path(verb), { params, long, extraTimeout }));
    return this;
  }

  /** Reads the sandbox's current state into `info`. */
  async refresh() {
    this.info = check("Sandbox", await this._c._json("GET", this._path()));
    return this;
  }

  async delete({ force = false } = {}) {
    this.info = check("Sandbox", await this._c._json("DELETE", this._path(), { params: { force: bool(force) } }));
    return this.info;
  }

  /** Stops it (SIGTERM, then SIGKILL after `timeout` seconds). */
  stop({ timeout } = {}) {
    return this._verb("stop", { timeout: timeout === undefined ? undefined : `${timeout}s` }, { extraTimeout: timeout ?? 0 });
  }
  start() {
    return this._verb("start");
  }
  pause() {
    return this._verb("pause");
  }
  resume() {
    return this._verb("resume");
  }
  reset() {
    return this._verb("reset");
  }
  /** Counts as activity: pushes back the idle timeout. */
  touch() {
    return this._verb("touch");
  }
  hibernate() {
    return this._verb("hibernate", undefined, { long: true });
  }
  wake() {
    return this._verb("wake", undefined, { long: true });
  }

  /** What changed in the writable layer against the template. */
  /** Freezes the sandbox and cuts its network; its files stay readable. `release()` ends it. */
  quarantine() {
    return this._verb("quarantine");
  }
  /** Ends a quarantine: the sandbox runs again, its rules restored. */
  release() {
    return this._verb("release");
  }

  /**
   * Sends one HTTP request to `port` of the sandbox through the daemon's
   * port proxy with this client's credentials; resolves with `{status,
   * headers, body}` (a Buffer) whatever the sandbox's server answered. The
   * proxy's own refusals (nothing listens, no right) reject with their
   * APIError. Never retried: the request may not be safe to repeat.
   */
  async portRequest(port, path = "/", { method = "GET", body, headers, params } = {}) {
    const target = this._path("ports", String(Math.trunc(port))) + "/" + String(path).replace(/^\/+/, "") + query(params);
    const h = { ...this._c._headers, ...headers };
    const content = body === undefined ? undefined : Buffer.from(body);
    if (content !== undefined) h["Content-Length"] = String(content.length);
    let res;
    try {
      res = await this._c._once(method, target, h, content, this._c._bound(false));
    } catch (err) {
      if (err instanceof BerthError) throw err;
      if (REFUSED.has(err.code)) throw new ConnectError(this._c.host, err);
      if (err.code === "ETIMEDOUT") throw new RequestTimeoutError(`${method} ${target}: no answer within the call's timeout`, err);
      throw new TransportError(`${method} ${target}: ${err.message || err.code}`, err);
    }
    const raw = await readAll(res);
    if (res.statusCode >= 400 && String(res.headers["content-type"] ?? "").startsWith("application/json")) {
      let e;
      try {
        e = JSON.parse(raw.toString("utf8")).error;
      } catch {
        e = undefined;
      }
      if (e && typeof e === "object" && "code" in e) throw fromResponse(res.statusCode, res.statusMessage, res.headers, raw);
    }
    return { status: res.statusCode, headers: res.headers, body: raw };
  }

  async diff() {
    return checkList("DiffEntry", await this._c._json("GET", this._path("diff")));
  }

  /**
   * The sandbox's CPU, memory and disk use now, each with its limit (GET
   * /v1/sandboxes/{id}/usage). A sandbox that is not running has nothing to
   * measure: its state, and zeros.
   */
  async usage() {
    return check("SandboxUsage", await this._c._json("GET", this._path("usage")));
  }

  /**
   * Forks `count` children from this sandbox's current state (ForkRequest's
   * other fields in `options`); retried safely with one Idempotency-Key.
   */
  async fork(count = 1, { idempotencyKey, ...fields } = {}) {
    const d = await this._c._json("POST", this._path("fork"), {
      body: { count, ...fields },
      idempotencyKey: idempotencyKey || newIdempotencyKey(),
      long: true,
    });
    check("ForkResponse", d);
    return (d.children ?? []).map((ch) => new Sandbox(this._c, ch));
  }

  async snapshot({ name, retentionSeconds, idempotencyKey } = {}) {
    const d = await this._c._json("POST", this._path("snapshots"), {
      body: { name, retention_seconds: retentionSeconds },
      idempotencyKey: idempotencyKey || newIdempotencyKey(),
      long: true,
    });
    return check("Snapshot", d);
  }

  /** This sandbox's snapshots (every page). */
  snapshots() {
    return this._c._list(this._path("snapshots"), undefined, "Snapshot");
  }

  /**
   * Runs a command and yields its output as it comes: ExecEvents with
   * `stream` and `data` (a Buffer), the last one with `exit`. An error event
   * throws its APIError; a stream cut before the exit throws StreamError.
   * A string `cmd` runs under `sh -c`.
   */
  async *execStream(cmd, { stdin, env, workdir, user, timeout } = {}) {
    const req = { cmd: argv(cmd), stdin: b64(stdin), env, workdir, user, timeout_seconds: timeout };
    const res = await this._c._send("POST", this._path("exec"), { body: req, headers: { Accept: "application/x-ndjson" }, stream: true, long: true });
    yield* this._c._execEvents(res);
  }

  /**
   * Runs a command to its end: its exit status and output (also handed to
   * `onStdout`/`onStderr` as it comes). A non-zero exit is not an error:
   * look at `exitCode`.
   */
  exec(cmd, { onStdout, onStderr, ...options } = {}) {
    return collect(this.execStream(cmd, options), "", onStdout, onStderr);
  }

  /** This sandbox's recorded events (every page). */
  events({ after = 0 } = {}) {
    return this._c.events.list({ sandbox: this.id, after });
  }

  /** A tar archive of `paths` (files or directories) in the sandbox. */
  async export(paths) {
    const res = await this._c._send("POST", this._path("export"), { body: { paths }, headers: { Accept: "application/x-tar" }, long: true });
    return res.body;
  }

  /** A token (and URL) that reaches `port` of the sandbox through the port proxy. */
  async portToken(port, { ttlSeconds } = {}) {
    const d = await this._c._json("POST", this._path("ports", String(Math.trunc(port)), "token"), { body: { ttl_seconds: ttlSeconds } });
    return check("PortToken", d);
  }

  async portTokens() {
    return checkList("PortTokenInfo", await this._c._json("GET", this._path("port-tokens")));
  }

  async revokePortToken(tokenId) {
    return check("PortTokenInfo", await this._c._json("DELETE", this._path("port-tokens", seg(tokenId))));
  }

  /** Mints a lease token limited to this sandbox and `scopes`. */
  async lease(scopes, { ttlSeconds } = {}) {
    return check("Lease", await this._c._json("POST", this._path("leases"), { body: { scopes, ttl_seconds: ttlSeconds || undefined } }));
  }

  /**
   * Revokes one lease of this sandbox (the id `lease()` answered; the
   * create-time lease's is "c-" and the sandbox id): refused from its next
   * request, its open streams ended.
   */
  async revokeLease(leaseId) {
    await this._c._send("DELETE", this._path("leases", seg(leaseId)));
  }

  /**
   * Opens an interactive terminal over the exec WebSocket: `const t = await
   * sb.pty(["sh"])`, then `t.send`, `t.resize`, `t.readUntil`, `t.wait`,
   * `t.close()`. With `tty: false` the session runs over pipes and
   * `t.closeStdin()` ends the command's input.
   */
  async pty(cmd = ["sh"], { rows = 24, cols = 80, env, workdir, user, tty = true } = {}) {
    const req = { cmd: argv(cmd), env, workdir, user, tty: tty || undefined, rows: tty ? rows : undefined, cols: tty ? cols : undefined };
    const t = new Pty(this._c._conn, this._c._headers, this._path("exec", "ws"));
    await t._open(req);
    return t;
  }
}

/** client.sandboxes: create, get, list and delete. */
class Sandboxes {
  constructor(client) {
    this._c = client;
  }

  /**
   * Creates a sandbox with any CreateSandboxRequest field (`template`,
   * `resources`, `env`, `labels`, ...). Sent with an Idempotency-Key
   * (yours, or a random one), so a retry after a cut connection never
   * makes two.
   */
  async create(request = {}, { idempotencyKey } = {}) {
    // A create that pulls an image lasts as long as the pull.
    const d = await this._c._json("POST", "/v1/sandboxes", {
      body: request,
      idempotencyKey: idempotencyKey || newIdempotencyKey(),
      long: Boolean(request.image),
    });
    return new Sandbox(this._c, check("Sandbox", d));
  }

  async get(idOrName) {
    return new Sandbox(this._c, check("Sandbox", await this._c._json("GET", "/v1/sandboxes/" + seg(idOrName))));
  }

  /** Every sandbox, page by page; `all` includes deleted ones still kept. */
  list({ all = false } = {}) {
    return this._c._list("/v1/sandboxes", { all: bool(all) }, "Sandbox", (d) => new Sandbox(this._c, d));
  }

  /** One page; pass its `nextCursor` for the next ("" at the end). */
  listPage({ all = false, limit, cursor } = {}) {
    return this._c._listPage("/v1/sandboxes", { all: bool(all) }, "Sandbox", { limit, cursor }, (d) => new Sandbox(this._c, d));
  }

  async delete(idOrName, { force = false } = {}) {
    return check("Sandbox", await this._c._json("DELETE", "/v1/sandboxes/" + seg(idOrName), { params: { force: bool(force) } }));
  }

  /** A sandbox's resource use now, by id or name, without fetching it first (as `sb.usage()`). */
  async usage(idOrName) {
    return check("SandboxUsage", await this._c._json("GET", "/v1/sandboxes/" + seg(idOrName) + "/usage"));
  }
}

/** sandbox.files: the files routes. */
class Files {
  constructor(client, id) {
    this._c = client;
    this._p = "/v1/sandboxes/" + seg(id) + "/files";
  }

  async read(path) {
    return (await this._c._send("GET", this._p, { params: { path } })).body;
  }

  /** Yields the file's bytes in chunks as they arrive. */
  async *readStream(path) {
    const res = await this._c._send("GET", this._p, { params: { path }, stream: true });
    try {
      const it = res[Symbol.asyncIterator]();
      for (;;) {
        let r;
        try {
          r = await it.next();
        } catch (err) {
          throw new StreamError(`reading ${path} broke off: ${err.message || err.code}`, err);
        }
        if (r.done) return;
        yield r.value;
      }
    } finally {
      res.destroy();
    }
  }

  /** The file's permission bits (X-Berth-File-Mode of a read). */
  async mode(path) {
    const res = await this._c._send("GET", this._p, { params: { path } });
    return parseInt(String(res.headers[FILE_MODE_HEADER] ?? "0"), 8);
  }

  /** Writes (replaces) a file; `mode` like 0o755. */
  async write(path, data, { mode } = {}) {
    const params = { path, mode: mode === undefined ? undefined : mode.toString(8).padStart(4, "0") };
    const res = await this._c._send("PUT", this._p, { params, body: typeof data === "string" ? data : Buffer.from(data) });
    return res.body.length ? check("FileInfo", JSON.parse(res.body.toString("utf8"))) : {};
  }

  /**
   * Writes (replaces) a file from `source`, sent as it comes and never held
   * whole here: an async iterable of bytes (a node Readable such as
   * fs.createReadStream, a web ReadableStream, an async generator). `mode`
   * like 0o755. Not retried (the source is read once).
   */
  async writeStream(path, source, { mode } = {}) {
    const params = { path, mode: mode === undefined ? undefined : mode.toString(8).padStart(4, "0") };
    const res = await this._c._send("PUT", this._p, { params, bodyStream: source, long: true });
    return res.body.length ? check("FileInfo", JSON.parse(res.body.toString("utf8"))) : {};
  }

  async stat(path) {
    return check("FileInfo", await this._c._json("GET", this._p + "/stat", { params: { path } }));
  }

  async list(path) {
    return checkList("FileInfo", await this._c._json("GET", this._p + "/list", { params: { path } }));
  }

  async mkdir(path, { parents = false } = {}) {
    await this._c._send("POST", this._p + "/mkdir", { params: { path, parents: bool(parents) } });
  }

  async remove(path, { recursive = false } = {}) {
    await this._c._send("DELETE", this._p, { params: { path, recursive: bool(recursive) } });
  }

  async move(src, dst, { noReplace = false } = {}) {
    await this._c._send("POST", this._p + "/move", { params: { path: src, to: dst, no_replace: bool(noReplace) } });
  }

  /**
   * Yields the changes under directory `path` as they happen: first
   * `ready`, then create, write, remove, rename and overflow events, until
   * the caller stops or the directory goes (`end`, which ends the
   * iteration). A failed watch throws its error.
   */
  async *watch(path, { recursive = false } = {}) {
    const res = await this._c._send("GET", this._p + "/watch", {
      params: { path, recursive: bool(recursive) },
      headers: { Accept: "application/x-ndjson" },
      stream: true,
      long: true,
    });
    for await (const d of this._c._ndjson(res)) {
      check("WatchEvent", d);
      if (d.type === "end") return;
      if (d.type === "error") throw fromStream(d.error ?? { code: "internal", message: `watch ${path} failed` });
      yield d;
    }
  }

  /** A tar archive of `path` (a file or a directory tree). */
  async readTar(path) {
    return (await this._c._send("GET", this._p, { params: { path, format: "tar" }, headers: { Accept: "application/x-tar" }, long: true })).body;
  }

  /** Unpacks a tar archive into `directory`. */
  async writeTar(directory, archive) {
    await this._c._send("PUT", this._p, {
      params: { path: directory, format: "tar" },
      body: Buffer.from(archive),
      headers: { "Content-Type": "application/x-tar" },
      long: true,
    });
  }
}

/** sandbox.processes: background processes. */
class Processes {
  constructor(client, id) {
    this._c = client;
    this._p = "/v1/sandboxes/" + seg(id) + "/processes";
  }

  /** Starts a background process (StartProcessRequest's other fields in `options`: tag, env, restart, ...). */
  async start(cmd, options = {}) {
    return check("Process", await this._c._json("POST", this._p, { body: { cmd: argv(cmd), ...options } }));
  }

  async list() {
    const d = check("ProcessList", await this._c._json("GET", this._p));
    return d.processes ?? [];
  }

  async get(id) {
    return check("Process", await this._c._json("GET", this._p + "/" + seg(id)));
  }

  /**
   * Yields the process's output (ProcessEvents, `data` a Buffer; `gap`
   * counts bytes dropped before this reader), with `follow` until it exits
   * (the last event carries `exit`).
   */
  async *logsStream(id, { follow = false } = {}) {
    const res = await this._c._send("GET", this._p + "/" + seg(id) + "/logs", {
      params: { follow: bool(follow) },
      headers: { Accept: "application/x-ndjson" },
      stream: true,
      long: follow,
    });
    for await (const d of this._c._ndjson(res)) {
      check("ProcessEvent", d);
      if (d.error) throw fromStream(d.error);
      yield { ...d, data: d.data === undefined ? undefined : Buffer.from(d.data, "base64") };
      if (d.exit) return;
    }
  }

  /** The output so far (or, with `follow`, to the process's end). */
  async logs(id, { follow = false } = {}) {
    const out = [];
    const err = [];
    let gap = 0;
    let exit;
    for await (const ev of this.logsStream(id, { follow })) {
      if (ev.exit) exit = ev.exit;
      else if (ev.gap) gap += ev.gap;
      else if (ev.data) (ev.stream === "stderr" ? err : out).push(ev.data);
    }
    return { stdout: Buffer.concat(out), stderr: Buffer.concat(err), exit, gap };
  }

  async stdin(id, data = "", { close = false } = {}) {
    await this._c._send("POST", this._p + "/" + seg(id) + "/stdin", { params: { close: bool(close) }, body: data });
  }

  async signal(id, signal) {
    await this._c._send("POST", this._p + "/" + seg(id) + "/signal", { body: { signal } });
  }

  async kill(id) {
    await this._c._send("POST", this._p + "/" + seg(id) + "/kill");
  }

  async wait(id) {
    return check("ExecExit", await this._c._json("POST", this._p + "/" + seg(id) + "/wait", { long: true }));
  }

  /**
   * Attaches to a background process over its WebSocket: its kept output,
   * then live output; `t.send` writes its stdin, `t.resize` resizes a PTY
   * process's terminal, `t.wait()` its exit. Leaving (`t.close()`) does not
   * end the process.
   */
  async attach(id) {
    const t = new Pty(this._c._conn, this._c._headers, this._p + "/" + seg(id) + "/ws");
    await t._open(undefined);
    return t;
  }
}
class Network {
  constructor(client, id) {
    this._c = client;
    this._p = "/v1/sandboxes/" + seg(id);
  }

  async get() {
    return check("NetworkRules", await this._c._json("GET", this._p + "/network"));
  }

  /** Adds `allow` rules and removes `deny` ones, live. */
  async update({ allow, deny } = {}) {
    return check("NetworkRules", await this._c._json("POST", this._p + "/network", { body: { allow, deny } }));
  }

  async flows({ after = 0 } = {}) {
    return checkList("Flow", await this._c._json("GET", this._p + "/flows", { params: { after: after || undefined } }));
  }
}

/** client.snapshots (a sandbox's own: sandbox.snapshots(), sandbox.snapshot()). */
class Snapshots {
  constructor(client) {
    this._c = client;
  }
  list() {
    return this._c._list("/v1/snapshots", undefined, "Snapshot");
  }
  async get(idOrName) {
    return check("Snapshot", await this._c._json("GET", "/v1/snapshots/" + seg(idOrName)));
  }
  async delete(idOrName) {
    await this._c._send("DELETE", "/v1/snapshots/" + seg(idOrName));
  }
  /** Rolls the snapshot's sandbox back to it. */
  async restore(idOrName) {
    return new Sandbox(this._c, check("Sandbox", await this._c._json("POST", "/v1/snapshots/" + seg(idOrName) + "/restore", { long: true })));
  }
}

/** client.templates: templates and their warm pools. */
class Templates {
  constructor(client) {
    this._c = client;
  }
  list() {
    return this._c._list("/v1/templates", undefined, "Template");
  }
  listPage({ limit, cursor } = {}) {
    return this._c._listPage("/v1/templates", undefined, "Template", { limit, cursor });
  }
  async get(name) {
    return check("Template", await this._c._json("GET", "/v1/templates/" + seg(name)));
  }
  async delete(name) {
    await this._c._send("DELETE", "/v1/templates/" + seg(name));
  }
  async getPool(name) {
    return check("Pool", await this._c._json("GET", "/v1/templates/" + seg(name) + "/pool"));
  }
  /** Keeps `min` sandboxes of the template warm (0 empties the pool). */
  async setPool(name, min) {
    return check("Pool", await this._c._json("PUT", "/v1/templates/" + seg(name) + "/pool", { body: { min } }));
  }
  /**
   * Forgets the size set for the template's pool: the default template's
   * is the daemon's automatic pool again, any other has none.
   */
  async clearPool(name) {
    return check("Pool", await this._c._json("PUT", "/v1/templates/" + seg(name) + "/pool", { body: { min: 0, auto: true } }));
  }

  /**
   * Imports template `name` from a registry image `ref` (with
   * `registryAuth`, or the daemon's credentials for the host's templates)
   * or from `path`, an OCI layout or docker-save tarball on the daemon's
   * host. Each layer's progress goes to `onProgress`.
   */
  async import(name, ref, { path, insecure, registryAuth, service, onProgress } = {}) {
    const body = { name, ref, path, insecure, registry_auth: registryAuth, service };
    const res = await this._c._send("POST", "/v1/templates/import", { body, headers: { Accept: "application/x-ndjson" }, stream: true, long: true });
    return this._importStream(res, onProgress);
  }

  /** Imports template `name` from a docker-save or OCI tarball sent from here (its bytes). */
  async upload(name, archive, { onProgress } = {}) {
    const res = await this._c._send("PUT", "/v1/templates/" + seg(name) + "/archive", {
      body: Buffer.from(archive),
      headers: { "Content-Type": "application/x-tar", Accept: "application/x-ndjson" },
      stream: true,
      long: true,
    });
    return this._importStream(res, onProgress);
  }

  _importStream(res, onProgress) {
    // ImportEvents: progress lines, then the template.
    return this._c._resultStream(res, "the import stream ended without a template", (d) => {
      if (d.template) return check("Template", d.template);
      if (d.progress) onProgress?.(check("ImportProgress", d.progress));
      return undefined;
    });
  }

  /**
   * Builds template `name` by running the `run` shell steps on top of
   * template `from`, each step's output handed to `onOutput` (BuildEvents:
   * `step`, `stream`, `data` as a Buffer) as it comes. Steps have no
   * network unless `network: "egress"` with `allow` rules. A failing step
   * rejects with its number in the message.
   */
  async build(name, from, run, { env, timeout, network, allow, service, onOutput } = {}) {
    const body = { name, from, run: [...run], env, timeout_seconds: timeout, network, allow, service };
    const res = await this._c._send("POST", "/v1/templates/build", { body, headers: { Accept: "application/x-ndjson" }, stream: true, long: true });
    return this._c._buildStream(res, onOutput);
  }

  /**
   * Builds template `name` from a Dockerfile: `context` is a tar archive
   * of the build context holding it (`dockerfile` names it, "Dockerfile"
   * by default); `FROM` names a berth template.
   */
  async buildDockerfile(name, context, { dockerfile, target, buildArgs, network, allow, timeout, onOutput } = {}) {
    const params = {
      dockerfile,
      target,
      buildargs: buildArgs ? JSON.stringify(buildArgs) : undefined,
      network,
      allow,
      timeout_seconds: timeout,
    };
    const res = await this._c._send("POST", "/v1/templates/" + seg(name) + "/dockerfile", {
      params,
      body: Buffer.from(context),
      headers: { "Content-Type": "application/x-tar", Accept: "application/x-ndjson" },
      stream: true,
      long: true,
    });
    return this._c._buildStream(res, onOutput);
  }

  /** Writes template `name` to a registry as the OCI image `ref`; each layer's upload goes to `onProgress`. */
  async push(name, ref, { insecure, registryAuth, onProgress } = {}) {
    const body = { ref, insecure, registry_auth: registryAuth };
    const res = await this._c._send("POST", "/v1/templates/" + seg(name) + "/push", {
      body,
      headers: { Accept: "application/x-ndjson" },
      stream: true,
      long: true,
    });
    return this._c._resultStream(res, "the push stream ended without a result", (d) => {
      check("PushEvent", d);
      if (d.result) return d.result;
      if (d.progress) onProgress?.(d.progress);
      return undefined;
    });
  }
}

/** client.volumes: named volumes. */
class Volumes {
  constructor(client) {
    this._c = client;
  }
  async create(name, { sizeBytes, inodes, idempotencyKey } = {}) {
    const d = await this._c._json("POST", "/v1/volumes", {
      body: { name, size_bytes: sizeBytes, inodes },
      idempotencyKey: idempotencyKey || newIdempotencyKey(),
    });
    return check("Volume", d);
  }
  /** Every volume, page by page; `all` includes the tombstones of deleted ones. */
  list({ all = false } = {}) {
    return this._c._list("/v1/volumes", { all: bool(all) }, "Volume");
  }
  listPage({ limit, cursor, all = false } = {}) {
    return this._c._listPage("/v1/volumes", { all: bool(all) }, "Volume", { limit, cursor });
  }
  async get(name) {
    return check("Volume", await this._c._json("GET", "/v1/volumes/" + seg(name)));
  }
  async delete(name) {
    await this._c._send("DELETE", "/v1/volumes/" + seg(name));
  }
}

/** client.secrets: values sandboxes see only as placeholders. */
class Secrets {
  constructor(client) {
    this._c = client;
  }
  async set(name, value) {
    return check("Secret", await this._c._json("PUT", "/v1/secrets/" + seg(name), { body: { value } }));
  }
  list() {
    return this._c._list("/v1/secrets", undefined, "Secret");
  }
  async delete(name) {
    await this._c._send("DELETE", "/v1/secrets/" + seg(name));
  }
  /** Re-wraps every stored secret under the new master key `key` (standard base64 of 32 bytes; the host's administrator only). */
  async rotateKey(key) {
    return check("RotateSecretsKeyResponse", await this._c._json("POST", "/v1/secrets/rotate-key", { body: { key } }));
  }
}

/** client.events: the recorded events, as pages or as a live stream. */
class Events {
  constructor(client) {
    this._c = client;
  }

  static _query(sandbox, types, after) {
    const sbs = typeof sandbox === "string" ? [sandbox] : [...(sandbox ?? [])];
    const q = { type: types?.length ? [...types] : undefined, after: after || undefined };
    if (sbs.length === 1) return ["/v1/sandboxes/" + seg(sbs[0]) + "/events", q];
    q.sandbox = sbs.length ? sbs : undefined;
    return ["/v1/events", q];
  }

  /** Every recorded event after id `after`, of one or more sandboxes and types, page by page. */
  list({ sandbox, types, after = 0 } = {}) {
    const [path, q] = Events._query(sandbox, types, after);
    return this._c._list(path, q, "Event");
  }

  listPage({ sandbox, types, after = 0, limit, cursor } = {}) {
    const [path, q] = Events._query(sandbox, types, after);
    return this._c._listPage(path, q, "Event", { limit, cursor });
  }

  /**
   * Follows the event stream (Server-Sent Events) from id `after`: yields
   * every event once, in order. A stream that breaks is reopened with
   * Last-Event-ID set to the last event yielded, so none is lost or
   * repeated; it gives up when no stream could be opened for
   * `reconnectFor` seconds, or on a 4xx answer (other than 429). Stop it
   * with `break`.
   */
  async *stream({ sandbox, types, after = 0, reconnectFor = 60 } = {}) {
    const [path, q] = Events._query(sandbox, types, after);
    delete q.after;
    let last = after;
    let retry = 2;
    let down = 0; // seconds spent without a stream
    for (;;) {
      const headers = { Accept: "text/event-stream" };
      if (last > 0) headers["Last-Event-ID"] = String(last);
      let res;
      try {
        res = await this._c._send("GET", path, { params: q, headers, stream: true, long: true });
      } catch (e) {
        if (e instanceof APIError && e.status < 500 && e.status !== 429) throw e;
        if (!(e instanceof BerthError)) throw e;
      }
      if (!res) {
        if (down >= reconnectFor) throw new StreamError(`event stream: no stream could be opened for ${down}s`);
        await this._c._sleep(retry);
        down += retry;
        continue;
      }
      down = 0;
      try {
        const ct = String(res.headers["content-type"] ?? "");
        if (!ct.startsWith("text/event-stream")) throw new StreamError(`GET ${path} answered ${JSON.stringify(ct)}, not an event stream`);
        const parser = new SSEParser();
        for await (const line of lines(res)) {
          for (const { data, retry: ms } of parser.feed(line)) {
            if (ms) retry = Math.min(ms / 1000, 30);
            if (!data) continue;
            const ev = check("Event", JSON.parse(data));
            if (ev.id <= last) continue; // never handed out twice, whatever the server sends
            last = ev.id;
            yield ev;
          }
        }
      } catch (e) {
        if (e instanceof BerthError || e instanceof SyntaxError || e?.name === "SpecMismatch") throw e;
        // cut: reconnect below
      } finally {
        res.destroy();
      }
      await this._c._sleep(retry);
    }
  }
}

/** client.audit: the tamper-evident audit log. */
class Audit {
  constructor(client) {
    this._c = client;
  }

  static _query({ since, until, actor, action, target } = {}) {
    const t = (v) => (v instanceof Date ? v.toISOString() : v);
    return { since: t(since), until: t(until), actor, action, target };
  }

  /** Every entry matching the filters, page by page. */
  list(filters = {}) {
    return this._c._list("/v1/audit", Audit._query(filters), "AuditEntry");
  }

  listPage({ limit, cursor, ...filters } = {}) {
    return this._c._listPage("/v1/audit", Audit._query(filters), "AuditEntry", { limit, cursor });
  }

  /** The whole log as NDJSON, for verification elsewhere. */
  async export() {
    return (await this._c._send("GET", "/v1/audit/export")).body;
  }

  async verify({ anchor } = {}) {
    return check("AuditVerify", await this._c._json("POST", "/v1/audit/verify", { body: anchor === undefined ? undefined : { anchor } }));
  }
}

/** client.keys: API keys (admin). */
class Keys {
  constructor(client) {
    this._c = client;
  }
  /** Makes a key; its secret (`key`) is in this answer only. */
  async create(role, { tenant, name, scopes, expiresInSeconds } = {}) {
    const body = { role, tenant, name, scopes: scopes?.length ? scopes : undefined, expires_in_seconds: expiresInSeconds };
    return check("CreatedAPIKey", await this._c._json("POST", "/v1/keys", { body }));
  }
  list() {
    return this._c._list("/v1/keys", undefined, "APIKey");
  }
  async revoke(idOrPrefix) {
    return check("APIKey", await this._c._json("DELETE", "/v1/keys/" + seg(idOrPrefix)));
  }
}

/** client.tenants (admin). */
class Tenants {
  constructor(client) {
    this._c = client;
  }
  async create(name) {
    return check("Tenant", await this._c._json("POST", "/v1/tenants", { body: { name } }));
  }
  async list() {
    return checkList("Tenant", await this._c._json("GET", "/v1/tenants"));
  }
  async delete(name) {
    await this._c._send("DELETE", "/v1/tenants/" + seg(name));
  }
}

/** client.quotas: a tenant's limits (admin) and the caller's own. */
class Quotas {
  constructor(client) {
    this._c = client;
  }
  async get(tenant) {
    return check("Quota", await this._c._json("GET", "/v1/tenants/" + seg(tenant) + "/quota"));
  }
  async set(tenant, quota) {
    return check("Quota", await this._c._json("PUT", "/v1/tenants/" + seg(tenant) + "/quota", { body: quota }));
  }
  /** The calling key's tenant's quota and usage. */
  async own() {
    return check("Quota", await this._c._json("GET", "/v1/quota"));
  }
}
