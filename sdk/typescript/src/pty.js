// Interactive terminals over the exec WebSocket (GET /v1/sandboxes/{id}/exec/ws).
//
// The wire, as client/interactive.go speaks it: the first message is the
// ExecRequest as JSON text; then binary messages whose first byte says what
// they carry: 0 stdin, 3 resize (JSON {"rows","cols"}), 5 stdin closed from
// the client; 1 stdout, 2 stderr, 4 the exit (JSON ExecExit, then close),
// 6 an error (JSON Error, then close) from the daemon.
//
// Node 20 has no global WebSocket (Node 22 has one, but without a way to
// dial a unix socket or to use the pinning agent), so this uses the `ws`
// package, the SDK's one runtime dependency.
import "./dispose.js";

import WebSocket from "ws";

import { StreamError, fromStream } from "./errors.js";
import { check } from "./wire.js";

const STDIN = 0, STDOUT = 1, STDERR = 2, RESIZE = 3, EXIT = 4, STDIN_EOF = 5, ERROR = 6;
const READ_LIMIT = 4 << 20;

/** One terminal session (Sandbox.pty), or an attach to a background process (Processes.attach). */
export class Pty {
  constructor(conn, headers, path) {
    this._conn = conn;
    this._headers = headers;
    this._path = path;
    this._chunks = [];
    this._waiters = [];
    this._ended = false;
    /** The command's exit status once it ended. */
    this.exit = undefined;
    this._error = undefined;
  }

  async _open(req) {
    const c = this._conn;
    let url;
    const opts = { headers: this._headers, maxPayload: READ_LIMIT, perMessageDeflate: false };
    if (c.socketPath) url = `ws+unix://${c.socketPath}:${c.prefix}${this._path}`;
    else {
      const host = c.hostname.includes(":") ? `[${c.hostname}]` : c.hostname;
      url = `${c.secure ? "wss" : "ws"}://${host}:${c.port}${c.prefix}${this._path}`;
      opts.agent = c.agent;
    }
    const ws = new WebSocket(url, opts);
    this._ws = ws;
    // Listen before the open is awaited: an attach's server speaks first
    // (the process's kept output), and ws emits frames that came in the
    // same read as the upgrade's answer right after "open", before the
    // code after an await of it runs; a handler added then loses them.
    let opened = false;
    ws.on("message", (msg, isBinary) => this._onMessage(msg, isBinary));
    ws.on("close", () => this._end());
    await new Promise((resolve, reject) => {
      ws.once("open", () => {
        opened = true;
        resolve();
      });
      ws.on("error", (err) => {
        if (!opened) return reject(err);
        this._error ??= new StreamError("the terminal connection failed", err);
        this._end();
      });
      ws.once("unexpected-response", (_req, res) => {
        reject(new StreamError(`the terminal was refused: HTTP ${res.statusCode}`));
        res.resume();
      });
    });
    // An exec's session opens with its request; an attach to a process sends none.
    if (req !== undefined) ws.send(JSON.stringify(req));
  }

  _onMessage(msg, isBinary) {
    if (!isBinary || msg.length === 0) return;
    const kind = msg[0];
    const payload = msg.subarray(1);
    if (kind === STDOUT || kind === STDERR) this._push(Buffer.from(payload));
    else if (kind === EXIT) {
      this.exit = check("ExecExit", JSON.parse(payload.toString("utf8")));
      this._end();
    } else if (kind === ERROR) {
      this._error = fromStream(JSON.parse(payload.toString("utf8")));
      this._end();
    }
  }

  _push(chunk) {
    const w = this._waiters.shift();
    if (w) w(chunk);
    else this._chunks.push(chunk);
  }

  _end() {
    if (this._ended) return;
    this._ended = true;
    for (const w of this._waiters.splice(0)) w(Buffer.alloc(0));
  }

  _send(buf) {
    if (this._ended || this._ws.readyState !== WebSocket.OPEN) return Promise.reject(new StreamError("the terminal session is over"));
    return new Promise((resolve, reject) => this._ws.send(buf, { binary: true }, (err) => (err ? reject(new StreamError("the terminal session is over", err)) : resolve())));
  }

  /** Types `data` (a string or bytes) into the terminal. */
  send(data) {
    return this._send(Buffer.concat([Buffer.from([STDIN]), Buffer.from(data)]));
  }

  /** Ends the command's input (pipes only; a terminal's end of input is "\x04"). */
  closeStdin() {
    return this._send(Buffer.from([STDIN_EOF]));
  }

  /** Resizes the terminal (the command sees SIGWINCH). */
  resize(rows, cols) {
    return this._send(Buffer.concat([Buffer.from([RESIZE]), Buffer.from(JSON.stringify({ rows, cols }))]));
  }

  /** The next output chunk; an empty Buffer once the session ended. */
  recv() {
    if (this._chunks.length) return Promise.resolve(this._chunks.shift());
    if (this._ended) return Promise.resolve(Buffer.alloc(0));
    return new Promise((resolve) => this._waiters.push(resolve));
  }

  /** Output up to and including `needle`; StreamError if the session ends first. */
  async readUntil(needle, limit = 1 << 20) {
    const n = Buffer.from(needle);
    let buf = Buffer.alloc(0);
    while (buf.indexOf(n) < 0) {
      const chunk = await this.recv();
      if (!chunk.length) {
        if (this._error) throw this._error;
        throw new StreamError(`the terminal ended before ${JSON.stringify(String(needle))} appeared; got ${JSON.stringify(buf.subarray(-200).toString())}`);
      }
      buf = Buffer.concat([buf, chunk]);
      if (buf.length > limit) throw new StreamError(`no ${JSON.stringify(String(needle))} in the first ${limit} bytes`);
    }
    return buf;
  }

  /** Waits for the command's exit status (draining output not read yet). */
  async wait() {
    while (!this._ended) await this.recv();
    if (this._error) throw this._error;
    if (!this.exit) throw new StreamError("the terminal closed without an exit status");
    return this.exit;
  }

  /** Closes the session. */
  close() {
    this._ws?.close();
    this._end();
  }

  async [Symbol.asyncDispose]() {
    this.close();
  }
}
