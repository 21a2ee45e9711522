// How the SDK reaches a daemon, the same way the berth CLI and the Python
// SDK do: the host (option, else BERTH_HOST, else the saved context named
// by the `context` option, BERTH_CONTEXT or the CLI config file's current
// one, else the default unix socket), the API key (option, else
// BERTH_API_KEY, else the context's, sent as a bearer token), and for an
// https:// host either a pinned certificate fingerprint (option, else
// BERTH_TLS_FINGERPRINT: "sha256:" and the hex SHA-256 of the leaf's DER,
// as `berth serve` prints it) or a CA file, else the context's. A context
// applies only when it gives the host: its key and TLS settings never go to
// a host named elsewhere (the CLI's rule, cmd/berth/context.go).
//
// Requests go through node's http/https modules rather than fetch: fetch
// cannot dial a unix socket, and it offers no hook to check a pinned
// certificate inside the handshake. The pin replaces chain and name
// verification, as in the Go client (client/tls.go), and is checked by the
// agent before it hands the connection to any request, so the API key is
// never written to a connection whose certificate did not match.
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import http from "node:http";
import https from "node:https";
import tls from "node:tls";

import { FingerprintError } from "./errors.js";

/** Where the daemon listens unless told otherwise (client.DefaultHost). */
export const DEFAULT_HOST = "unix:///run/berth/berth.sock";
export const CONTEXT_ENV = "BERTH_CONTEXT";
/** The context name that means no saved context (the local socket). */
export const DEFAULT_CONTEXT = "default";
export const IDEMPOTENCY_HEADER = "Idempotency-Key";
export const NEXT_CURSOR_HEADER = "berth-next-cursor";
export const SANDBOX_ID_HEADER = "x-berth-sandbox-id";
export const FILE_MODE_HEADER = "x-berth-file-mode";

/** Parses "sha256:<64 hex digits>" (or 32 colon-separated bytes) into 32 bytes. */
export function parseFingerprint(s) {
  const prefix = "sha256:";
  if (typeof s !== "string" || s.slice(0, prefix.length).toLowerCase() !== prefix) {
    throw new TypeError('invalid TLS fingerprint: want "sha256:<64 hex digits>"');
  }
  let h = s.slice(prefix.length);
  if (h.includes(":")) {
    const parts = h.split(":");
    if (parts.length !== 32 || parts.some((p) => p.length !== 2)) {
      throw new TypeError("invalid TLS fingerprint: want 32 colon-separated bytes");
    }
    h = parts.join("");
  }
  if (h.length !== 64) throw new TypeError(`invalid TLS fingerprint: want 64 hex digits, got ${h.length}`);
  if (!/^[0-9a-fA-F]+$/.test(h)) throw new TypeError("invalid TLS fingerprint: not hex");
  return Buffer.from(h, "hex");
}

export function fingerprintOf(der) {
  return "sha256:" + createHash("sha256").update(der).digest("hex");
}

// An https agent that connects without chain or name verification and
// hands a connection to its request only once the leaf certificate's
// SHA-256 matched the pin (node's Agent accepts a createConnection that
// answers through its callback).
class PinnedAgent extends https.Agent {
  constructor(want, options) {
    super(options);
    this.want = want;
  }

  createConnection(options, callback) {
    let done = false;
    const finish = (err, sock) => {
      if (done) return;
      done = true;
      callback(err, sock);
    };
    const { servername, ...rest } = options;
    const opts = { ...rest, rejectUnauthorized: false };
    // An IP address is no server name (node warns when it is sent as one).
    if (servername && !/^[0-9.]+$|:/.test(servername)) opts.servername = servername;
    const sock = tls.connect(opts);
    sock.once("secureConnect", () => {
      const der = sock.getPeerCertificate(false)?.raw;
      const got = der ? createHash("sha256").update(der).digest() : Buffer.alloc(0);
      if (got.length !== this.want.length || !timingSafeEqual(got, this.want)) {
        const err = new FingerprintError(der ? fingerprintOf(der) : "(none)", "sha256:" + this.want.toString("hex"));
        sock.destroy();
        finish(err);
        return;
      }
      finish(null, sock);
    });
    sock.once("error", (err) => finish(err));
  }
}

/**
 * The berth CLI's config file, which holds its saved contexts:
 * $XDG_CONFIG_HOME/berth/config.json, else ~/.config/berth/config.json.
 */
export function configPath() {
  return join(process.env.XDG_CONFIG_HOME || join(homedir(), ".config"), "berth", "config.json");
}

/**
 * The saved context `name` (else BERTH_CONTEXT, else the config file's
 * current one) as {name, def}, or {name: "", def: undefined} for none. A
 * config file that stores a key and that others can read is refused, as the
 * CLI refuses it.
 */
export function loadContext(name) {
  name = name || process.env[CONTEXT_ENV] || undefined;
  const path = configPath();
  let cfg;
  try {
    cfg = JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    if (err.code !== "ENOENT") throw new TypeError(`config ${path}: ${err.message}`);
    if (name && name !== DEFAULT_CONTEXT) throw new TypeError(`context "${name}" is not in ${path} (no such file); see berth context ls`);
    return { name: "", def: undefined };
  }
  const contexts = cfg.contexts ?? {};
  if (Object.values(contexts).some((d) => d?.api_key) && statSync(path).mode & 0o077) {
    throw new TypeError(`config ${path} holds an API key but is readable by others: chmod 600 it`);
  }
  name = name || cfg.current || undefined;
  if (!name || name === DEFAULT_CONTEXT) return { name: "", def: undefined };
  const def = contexts[name];
  if (!def?.host) throw new TypeError(`context "${name}" is not in ${path}; see berth context ls`);
  return { name, def };
}

function readKeyFile(path) {
  const key = readFileSync(path, "utf8").trim();
  if (!key || /[\r\n]/.test(key)) throw new TypeError(`API key file ${path} must hold one line`);
  return key;
}

/**
 * Resolves the connection as the CLI does: returns what requests and the
 * WebSocket dialer need.
 */
export function resolve({ host, apiKey, tlsFingerprint, tlsCa, context } = {}) {
  if (host && context) throw new TypeError("host and context both name a daemon: give one");
  host = host || process.env.BERTH_HOST || undefined;
  const ctx = host ? { name: "", def: undefined } : loadContext(context);
  if (ctx.def) host = ctx.def.host;
  host = host || DEFAULT_HOST;
  apiKey = apiKey ?? (process.env.BERTH_API_KEY || undefined);
  if (apiKey === undefined && ctx.def) {
    if (ctx.def.api_key) apiKey = ctx.def.api_key;
    else if (ctx.def.api_key_file) apiKey = readKeyFile(ctx.def.api_key_file);
  }
  apiKey ??= "";
  tlsFingerprint = tlsFingerprint ?? (process.env.BERTH_TLS_FINGERPRINT || undefined);
  if (tlsFingerprint === undefined && tlsCa === undefined && ctx.def) {
    // The context's TLS settings go as a unit, with its host.
    tlsFingerprint = ctx.def.tls_fingerprint || undefined;
    tlsCa = ctx.def.tls_ca || undefined;
  }
  let u;
  try {
    u = new URL(host);
  } catch {
    throw new TypeError(`invalid host ${JSON.stringify(host)}: want unix:///path, http://host:port or https://host:port`);
  }
  const conn = { host, apiKey, context: ctx.name, socketPath: undefined, secure: false, hostname: "", port: 0, prefix: "", agent: undefined };
  switch (u.protocol) {
    case "unix:":
      conn.socketPath = decodeURIComponent(u.pathname || u.host);
      if (!conn.socketPath) throw new TypeError(`invalid host ${JSON.stringify(host)}: want unix:///path/to/socket`);
      break;
    case "http:":
    case "https:":
    case "tcp:": // as docker does: plain HTTP
      if (!u.host) throw new TypeError(`invalid host ${JSON.stringify(host)}: missing host:port`);
      conn.secure = u.protocol === "https:";
      conn.hostname = u.hostname.replace(/^\[|\]$/g, "");
      conn.port = Number(u.port) || (conn.secure ? 443 : 80);
      conn.prefix = u.pathname.replace(/\/+$/, "");
      break;
    default:
      throw new TypeError(`invalid host ${JSON.stringify(host)}: scheme must be unix, http or https`);
  }
  if ((tlsFingerprint || tlsCa) && !conn.secure) {
    throw new TypeError(`invalid host ${JSON.stringify(host)}: a TLS fingerprint or CA needs an https:// host`);
  }
  const base = { keepAlive: true };
  if (tlsFingerprint) {
    conn.agent = new PinnedAgent(parseFingerprint(tlsFingerprint), { ...base, minVersion: "TLSv1.2" });
  } else if (conn.secure) {
    conn.agent = new https.Agent({ ...base, minVersion: "TLSv1.2", ca: tlsCa ? readFileSync(tlsCa) : undefined });
  } else {
    conn.agent = new http.Agent(base);
  }
  return conn;
}

/** A fresh random Idempotency-Key (32 hex digits), as the Go client makes them. */
export function newIdempotencyKey() {
  return randomBytes(16).toString("hex");
}

// Retries: the backoff (seconds) between attempts when the answer says
// nothing, and what may be retried. A request is retried when the daemon
// refused it without doing it (429, or 503) — unless its Retry-After is
// past the caller's maxRetryWait — and, when it is safe to send twice
// (GET, HEAD, PUT, or a POST/DELETE carrying an Idempotency-Key), when the
// connection broke before an answer came.
export const BACKOFF = [0.25, 0.5, 1, 2, 4];
export const SAFE_METHODS = new Set(["GET", "HEAD", "PUT", "OPTIONS"]);

export function backoff(attempt) {
  return BACKOFF[Math.min(attempt, BACKOFF.length - 1)];
}

/** How long (seconds) to wait before retrying after an API error, or undefined for no retry. */
export function retryDelay(err, attempt, maxWait) {
  if (err.status === 429 || err.status === 503 || err.code === "idempotency_in_progress") {
    const d = err.retryAfter ?? backoff(attempt);
    return d <= maxWait ? d : undefined;
  }
  return undefined;
}
