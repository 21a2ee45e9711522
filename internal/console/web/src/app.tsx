// The shell: sign-in (no navigation), then the navigation the caller's
// rights allow and the page the URL fragment names.
import { createContext } from "preact";
import { useContext, useEffect, useState } from "preact/hooks";
import { session, whenUnauthenticated, whoami, get } from "./api";
import { Rights } from "./rights";
import type { Version } from "./types";
import { SignIn, redeemCode } from "./pages/signin";
import { Dashboard } from "./pages/dashboard";
import { SandboxList } from "./pages/sandboxes";
import { SandboxPage } from "./pages/sandbox";
import { Pools, Volumes, Snapshots } from "./pages/objects";
import { Templates } from "./pages/templates";
import { Secrets, Keys, Tenants } from "./pages/admin";
import { Audit } from "./pages/audit";
import { Webhooks } from "./pages/webhooks";

export type Ctx = { rights: Rights; version: Version | null; live: (up: boolean | null) => void };
const AppCtx = createContext<Ctx | null>(null);
export const useApp = () => useContext(AppCtx)!;

/** The route: the fragment's first part and the rest. */
function useRoute(): [string, string] {
  const parse = (): [string, string] => {
    const parts = location.hash.replace(/^#\/?/, "").split("/");
    return [parts[0] || "", parts.slice(1).map(decodeURIComponent).join("/")];
  };
  const [r, setR] = useState(parse);
  useEffect(() => {
    const f = () => setR(parse());
    window.addEventListener("hashchange", f);
    return () => window.removeEventListener("hashchange", f);
  }, []);
  return r;
}

type Page = { path: string; label: string; show: (r: Rights) => boolean };
const pages: Page[] = [
  { path: "", label: "Dashboard", show: () => true },
  { path: "sandboxes", label: "Sandboxes", show: () => true },
  { path: "templates", label: "Templates", show: () => true },
  { path: "pools", label: "Pools", show: () => true },
  { path: "volumes", label: "Volumes", show: () => true },
  { path: "snapshots", label: "Snapshots", show: () => true },
  { path: "secrets", label: "Secrets", show: (r) => r.can("secrets") },
  { path: "keys", label: "Keys", show: (r) => r.can("keys") },
  { path: "tenants", label: "Tenants", show: (r) => r.host },
  { path: "webhooks", label: "Webhooks", show: (r) => r.host },
  { path: "audit", label: "Audit", show: (r) => r.can("audit") },
];

export function App() {
  const [rights, setRights] = useState<Rights | null>(null);
  const [version, setVersion] = useState<Version | null>(null);
  const [signInNote, setSignInNote] = useState<{ why?: string; error?: string }>({});
  const [booting, setBooting] = useState(true);
  const [live, setLive] = useState<boolean | null>(null);
  const [route, rest] = useRoute();

  const signOut = (why: string) => {
    const sess = session.sessionKeyID();
    const k = session.key();
    session.clear();
    if (sess && k) {
      // A key from a sign-in code dies with the sign-out.
      fetch("/v1/keys/" + encodeURIComponent(sess), { method: "DELETE", headers: { Authorization: "Bearer " + k } }).catch(() => {});
    }
    setRights(null);
    setLive(null);
    setSignInNote({ why });
  };
  whenUnauthenticated(signOut);

  const enter = async () => {
    const who = await whoami({ noSignout: true });
    setRights(new Rights(who));
    get<Version>("/v1/version").then(setVersion, () => setVersion(null));
    if (!/^#\//.test(location.hash)) history.replaceState(null, "", "#/");
    // replaceState fires no hashchange: the route is read again here
    // (after a sign-in link, it was the code's fragment).
    window.dispatchEvent(new HashChangeEvent("hashchange"));
  };

  useEffect(() => {
    (async () => {
      const r = await redeemCode();
      if (r.error) setSignInNote({ error: r.error });
      if (session.key()) {
        try {
          await enter();
        } catch (e) {
          session.clear();
          setSignInNote({ error: String((e as Error).message || e) });
        }
      }
      setBooting(false);
    })();
  }, []);

  if (booting) return <main id="main" />;
  if (!rights) {
    return (
      <>
        <header id="top">
          <span class="brand">berth</span>
        </header>
        <main id="main">
          <SignIn
            why={signInNote.why}
            error={signInNote.error}
            onKey={async (key) => {
              session.set(key);
              try {
                await enter();
              } catch (e) {
                session.clear();
                throw e;
              }
            }}
          />
        </main>
      </>
    );
  }
  const visible = pages.filter((p) => p.show(rights));
  const current = route === "sandbox" ? "sandboxes" : route;
  let page;
  switch (route) {
    case "":
      page = <Dashboard />;
      break;
    case "sandboxes":
      page = <SandboxList />;
      break;
    case "sandbox":
      page = <SandboxPage id={rest} key={rest} />;
      break;
    case "templates":
      page = <Templates />;
      break;
    case "pools":
      page = <Pools />;
      break;
    case "volumes":
      page = <Volumes />;
      break;
    case "snapshots":
      page = <Snapshots />;
      break;
    case "secrets":
      page = <Secrets />;
      break;
    case "keys":
      page = <Keys />;
      break;
    case "tenants":
      page = <Tenants />;
      break;
    case "audit":
      page = <Audit />;
      break;
    case "webhooks":
      page = <Webhooks />;
      break;
    default:
      page = <p class="error">No such page.</p>;
  }
  return (
    <AppCtx.Provider value={{ rights, version, live: setLive }}>
      <a class="skip" href="#main" onClick={(e) => { e.preventDefault(); (document.querySelector("main h1") as HTMLElement | null)?.focus(); }}>
        Skip to content
      </a>
      <header id="top">
        <a class="brand" href="#/">
          berth
        </a>
        <nav id="nav" aria-label="Pages">
          {visible.map((p) => (
            <a href={"#/" + p.path} class={current === p.path ? "active" : undefined} aria-current={current === p.path ? "page" : undefined}>
              {p.label}
            </a>
          ))}
        </nav>
        <span class="who" id="who" title={rights.who.scopes.join(", ")}>
          {rights.role}
          {rights.who.tenant ? " · " + rights.who.tenant : rights.host ? " · host" : ""}
        </span>
        {live !== null && (
          <span id="live" class={"live " + (live ? "on" : "off")}>
            {live ? "live" : "offline (reconnecting)"}
          </span>
        )}
        <button type="button" id="signout" onClick={() => signOut("Signed out.")}>
          Sign out
        </button>
      </header>
      <main id="main">{page}</main>
    </AppCtx.Provider>
  );
}
