// The terminal: xterm.js over the PTY WebSocket. The key travels in the
// berth.bearer. subprotocol (a browser's WebSocket cannot carry a
// header); the first message is the JSON exec request, then binary frames
// tagged by their first byte (0 stdin, 1 stdout, 2 stderr, 3 resize,
// 4 exit, 6 error).
import { FitAddon } from "@xterm/addon-fit";
import { Terminal as XTerm } from "@xterm/xterm";
import { useEffect, useRef, useState } from "preact/hooks";
import { sbPath, session } from "../api";

export function Terminal(props: { id: string; cmd?: string[] }) {
  const box = useRef<HTMLDivElement>(null);
  const [status, setStatus] = useState("connecting");
  useEffect(() => {
    // Links the sandbox prints (OSC 8) open with noopener: a window opened
    // without it gets a copy of this tab's sessionStorage, the key with
    // it, and a sandbox page behind the path port proxy shares this origin.
    const linkHandler = {
      activate: (_e: MouseEvent, uri: string) => {
        let u: URL;
        try {
          u = new URL(uri);
        } catch {
          return;
        }
        if (u.origin === location.origin || (u.protocol !== "https:" && u.protocol !== "http:")) return;
        window.open(u.href, "_blank", "noopener,noreferrer");
      },
    };
    const term = new XTerm({ fontFamily: "ui-monospace, Menlo, Consolas, monospace", fontSize: 13, cursorBlink: true, linkHandler });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(box.current!);
    try {
      fit.fit();
    } catch {
      /* not laid out yet */
    }
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(proto + "//" + location.host + sbPath(props.id) + "/exec/ws", ["berth", "berth.bearer." + session.key()]);
    ws.binaryType = "arraybuffer";
    const enc = new TextEncoder();
    const dec = new TextDecoder();
    const frame = (kind: number, payload: Uint8Array) => {
      const b = new Uint8Array(1 + payload.length);
      b[0] = kind;
      b.set(payload, 1);
      return b;
    };
    let opened = false;
    ws.onopen = () => {
      opened = true;
      setStatus("connected");
      ws.send(JSON.stringify({ cmd: props.cmd || ["/bin/sh"], tty: true, rows: term.rows, cols: term.cols, env: { TERM: "xterm-256color" } }));
      term.focus();
    };
    ws.onmessage = (m) => {
      const b = new Uint8Array(m.data as ArrayBuffer);
      if (!b.length) return;
      const body = b.subarray(1);
      switch (b[0]) {
        case 1:
        case 2:
          term.write(body);
          break;
        case 4: {
          let code = "";
          try {
            code = String(JSON.parse(dec.decode(body)).code);
          } catch {
            /* no code */
          }
          setStatus("the shell exited" + (code ? " with status " + code : ""));
          break;
        }
        case 6:
          try {
            setStatus("error: " + JSON.parse(dec.decode(body)).message);
          } catch {
            setStatus("error");
          }
          break;
      }
    };
    ws.onclose = (e) => {
      setStatus((s) =>
        s === "connected"
          ? "disconnected"
          : opened
            ? s
            : "The terminal could not connect (" + (e.code === 1006 ? "refused or unreachable" : "code " + e.code) + ").",
      );
    };
    const d1 = term.onData((d) => ws.readyState === 1 && ws.send(frame(0, enc.encode(d))));
    const d2 = term.onResize(({ rows, cols }) => ws.readyState === 1 && ws.send(frame(3, enc.encode(JSON.stringify({ rows, cols })))));
    const onResize = () => {
      try {
        fit.fit();
      } catch {
        /* hidden */
      }
    };
    window.addEventListener("resize", onResize);
    return () => {
      window.removeEventListener("resize", onResize);
      d1.dispose();
      d2.dispose();
      ws.close();
      term.dispose();
    };
  }, [props.id]);
  return (
    <>
      <div class="term" id="terminal" ref={box} role="application" aria-label="Terminal: a shell in the sandbox" />
      <p class="muted" id="terminal-status" role="status">
        {status}
      </p>
    </>
  );
}
