// Sign-in: a key typed in, or the one-time code of `berth console`'s
// link, traded for a key. No navigation is shown before sign-in.
import { useEffect, useRef, useState } from "preact/hooks";
import { session, words } from "../api";

/**
 * A sign-in link carries its one-time code in the fragment (#code=...):
 * never sent to a server, never in a Referer. It is dropped from the
 * address bar and history before anything else, then traded for a key.
 */
export async function redeemCode(): Promise<{ error?: string }> {
  const m = /^#code=([A-Za-z0-9_%]+)$/.exec(location.hash);
  if (!m) return {};
  history.replaceState(null, "", location.pathname + location.search + "#/");
  try {
    const r = await fetch("/v1/console/session", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ code: decodeURIComponent(m[1]) }),
      cache: "no-store",
    });
    const b = await r.json();
    if (!r.ok) throw new Error(b.error ? b.error.message : "HTTP " + r.status);
    session.set(b.api_key, b.key_id);
    return {};
  } catch (e) {
    return { error: "The sign-in link did not work: " + (e as Error).message + ". Links work once, for 2 minutes." };
  }
}

export function SignIn(props: { why?: string; error?: string; onKey: (key: string) => Promise<void> }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState(props.error || "");
  const [busy, setBusy] = useState(false);
  const input = useRef<HTMLInputElement>(null);
  useEffect(() => input.current?.focus(), []);
  return (
    <section class="card signin" aria-labelledby="signin-h">
      <h1 id="signin-h">Sign in to berth</h1>
      {props.why && <p class="muted">{props.why}</p>}
      <form
        id="signin"
        onSubmit={async (ev) => {
          ev.preventDefault();
          setError("");
          setBusy(true);
          try {
            await props.onKey(key.trim());
            setKey("");
          } catch (e) {
            setError(words(e));
          } finally {
            setBusy(false);
          }
        }}
      >
        <label for="apikey">API key</label>
        <input
          ref={input}
          type="password"
          id="apikey"
          autocomplete="off"
          placeholder="berth_..."
          required
          value={key}
          onInput={(e) => setKey((e.target as HTMLInputElement).value)}
        />
        <p>
          <button class="act primary" type="submit" id="signin-submit" disabled={busy}>
            Sign in
          </button>
        </p>
      </form>
      <p class="error" id="signin-error" role="alert">
        {error}
      </p>
      <p class="muted">
        On the daemon’s host, <code>berth console</code> prints a one-time sign-in link instead.
      </p>
    </section>
  );
}
