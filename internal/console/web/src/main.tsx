// berth web console: the application's entry. Rules it keeps
// (docs/console.md): everything from the API is put on the page as text;
// the credential lives in this tab's sessionStorage and travels only in
// the Authorization header (on WebSockets, in the berth.bearer.
// subprotocol), never in a URL.
import { render } from "preact";
import { App } from "./app";
import "./app.css";

// xterm.js writes its theme into <style> elements; the page's CSP lets
// only those carrying this answer's nonce apply.
const NONCE = (document.currentScript as HTMLScriptElement | null)?.nonce || "";
const createElement = Document.prototype.createElement;
Document.prototype.createElement = function (this: Document, tag: string, opts?: ElementCreationOptions) {
  const el = createElement.call(this, tag, opts);
  if (NONCE && String(tag).toLowerCase() === "style") (el as HTMLStyleElement).nonce = NONCE;
  return el;
} as typeof Document.prototype.createElement;

render(<App />, document.getElementById("app")!);
