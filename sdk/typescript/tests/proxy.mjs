// A loopback-only fault proxy for the retry and resumption tests (the node
// twin of sdk/python/tests/proxy.py): it reads each connection's first
// request, records it, and answers it as the next scripted action says — a
// canned 429/503 with Retry-After, a dropped connection (closed with no
// answer), or a pass-through to the daemon's plain-HTTP listener, optionally
// cut right after the first Server-Sent Event or stripped of its
// Last-Event-ID. Every later request on a passed-through connection is
// piped unseen, so tests script one action per connection.
import net from "node:net";

export class Proxy {
  // actions: "429[:N]", "503[:N]" (N: Retry-After), "drop", "pass",
  // "cut-after-event", "cut-after-line" (after the first NDJSON line of the
  // body), "replay" (pass without the Last-Event-ID header), "stall" (read
  // the request, never answer: the connection is held until close()).
  static async to(httpURL, actions = []) {
    const u = new URL(httpURL);
    const p = new Proxy(u.hostname, Number(u.port), actions);
    await new Promise((resolve) => p.server.listen(0, "127.0.0.1", resolve));
    p.url = `http://127.0.0.1:${p.server.address().port}`;
    return p;
  }

  constructor(host, port, actions) {
    this.upstream = { host, port };
    this.actions = [...actions];
    this.seen = [];
    this.sockets = new Set();
    this.server = net.createServer((c) => this.#serve(c));
  }

  close() {
    for (const s of this.sockets) s.destroy();
    return new Promise((resolve) => this.server.close(resolve));
  }

  async [Symbol.asyncDispose]() {
    await this.close();
  }

  #track(s) {
    this.sockets.add(s);
    s.on("close", () => this.sockets.delete(s));
    s.on("error", () => {});
  }

  #serve(c) {
    this.#track(c);
    let buf = Buffer.alloc(0);
    const onData = (b) => {
      buf = Buffer.concat([buf, b]);
      const end = buf.indexOf("\r\n\r\n");
      if (end < 0) return;
      const head = buf.subarray(0, end).toString("latin1").split("\r\n");
      const headers = {};
      for (const ln of head.slice(1)) {
        const i = ln.indexOf(":");
        headers[ln.slice(0, i).trim().toLowerCase()] = ln.slice(i + 1).trim();
      }
      const n = Number(headers["content-length"] ?? 0);
      if (buf.length < end + 4 + n) return;
      c.off("data", onData);
      c.pause();
      const [method, path] = head[0].split(" ");
      this.seen.push({ method, path, headers });
      this.#act(c, this.actions.shift() ?? "pass", buf, headers);
    };
    c.on("data", onData);
  }

  #act(c, action, raw, headers) {
    if (action === "drop") {
      c.destroy();
      return;
    }
    if (action === "stall") return;
    if (action.startsWith("429") || action.startsWith("503")) {
      const [code, after] = action.split(":");
      const reason = code === "429" ? "Too Many Requests" : "Service Unavailable";
      const body = `{"error":{"code":"${code === "429" ? "rate_limited" : "unavailable"}","message":"slow down","request_id":"proxy-1"}}`;
      let hdr = `HTTP/1.1 ${code} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n`;
      if (after) hdr += `Retry-After: ${after}\r\n`;
      c.end(hdr + "\r\n" + body);
      return;
    }
    if (action === "replay" && headers["last-event-id"] !== undefined) {
      // As a server that lost its place would: drop Last-Event-ID, so the
      // stream starts over from the first event.
      const s = raw.toString("latin1").split("\r\n").filter((ln) => !ln.toLowerCase().startsWith("last-event-id:"));
      raw = Buffer.from(s.join("\r\n"), "latin1");
    }
    const u = net.connect(this.upstream);
    this.#track(u);
    u.write(raw);
    c.pipe(u);
    c.resume();
    c.on("close", () => u.destroy());
    u.on("close", () => c.destroy());
    if (action !== "cut-after-event" && action !== "cut-after-line") {
      u.pipe(c);
      return;
    }
    // Forward up to the end of the first event (or line), then cut (in the middle of
    // a chunk of the chunked body, as a network would).
    let seen = Buffer.alloc(0);
    let cut = false;
    u.on("data", (b) => {
      if (cut) return;
      const start = seen.length;
      seen = Buffer.concat([seen, b]);
      let end = -1;
      if (action === "cut-after-event") {
        const d = seen.indexOf("\ndata:");
        end = d >= 0 ? seen.indexOf("\n\n", d) : -1;
      } else {
        const body = seen.indexOf("\r\n\r\n");
        end = body >= 0 ? seen.indexOf("}\n", body) : -1;
      }
      if (end < 0) {
        c.write(b);
        return;
      }
      cut = true;
      c.write(seen.subarray(start, end + 2), () => {
        c.destroy();
        u.destroy();
      });
    });
  }
}
