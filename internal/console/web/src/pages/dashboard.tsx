// The dashboard: for the host, the /metrics measures sampled every 3 s
// while open; for everyone, their sandboxes by state and their quota.
import { useEffect, useRef, useState } from "preact/hooks";
import { get, pages, text } from "../api";
import { useApp } from "../app";
import { Spark } from "../components/chart";
import { Card, ErrorText, KV, PageTitle, StateBadge } from "../components/ui";
import { bytes, cpus, plural } from "../format";
import type { Quota, Sandbox } from "../types";

type Sample = Map<string, { labels: Record<string, string>; value: number }[]>;

function parseMetrics(t: string): Sample {
  const out: Sample = new Map();
  for (const line of t.split("\n")) {
    if (!line || line[0] === "#") continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    if (m[3]) for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    if (!out.has(m[1])) out.set(m[1], []);
    out.get(m[1])!.push({ labels, value: Number(m[4]) });
  }
  return out;
}
const sumOf = (s: Sample, name: string, f?: (l: Record<string, string>) => boolean) =>
  (s.get(name) || []).filter((x) => !f || f(x.labels)).reduce((a, x) => a + x.value, 0);

type Chart = { id: string; title: string; fmt: (v: number) => string; val?: (s: Sample) => number; rate?: boolean; mean?: string };
const secs = (v: number) => (v < 1 ? (v * 1000).toFixed(0) + " ms" : v.toFixed(2) + " s");
const charts: Chart[] = [
  { id: "live", title: "Live sandboxes", fmt: (v) => String(Math.round(v)), val: (s) => sumOf(s, "berth_sandboxes", (l) => !["deleted", "failed"].includes(l.state)) },
  { id: "creates", title: "Creates per minute", rate: true, fmt: (v) => v.toFixed(1), val: (s) => sumOf(s, "berth_sandbox_creates_total") },
  { id: "tti", title: "Time to interactive (mean)", mean: "berth_time_to_interactive_seconds", fmt: secs },
  { id: "execs", title: "Commands run per minute", rate: true, fmt: (v) => v.toFixed(1), val: (s) => sumOf(s, "berth_exec_completions_total") },
  { id: "resume", title: "Resume latency (mean)", mean: "berth_resume_seconds", fmt: secs },
  { id: "cleanup", title: "Cleanup lag (mean)", mean: "berth_cleanup_lag_seconds", fmt: secs },
  { id: "storage", title: "Storage used", fmt: bytes, val: (s) => sumOf(s, "berth_storage_bytes") },
  { id: "undeleted", title: "Left after a failed deletion", fmt: (v) => String(Math.round(v)), val: (s) => sumOf(s, "berth_sandboxes_undeleted") },
  { id: "teardown", title: "Teardown failures per minute", rate: true, fmt: (v) => v.toFixed(1), val: (s) => sumOf(s, "berth_teardown_failures_total") },
  { id: "requests", title: "API requests per minute", rate: true, fmt: (v) => v.toFixed(0), val: (s) => sumOf(s, "berth_http_requests_total") },
];

function Measures() {
  const [series, setSeries] = useState<Record<string, (number | null)[]>>({});
  const [error, setError] = useState<unknown>(null);
  const prev = useRef<{ s: Sample; t: number } | null>(null);
  useEffect(() => {
    const ac = new AbortController();
    const sample = async () => {
      let s: Sample;
      try {
        s = parseMetrics(await text("/metrics", { signal: ac.signal }));
      } catch (e) {
        if (!ac.signal.aborted) setError(e);
        return;
      }
      setError(null);
      const t = Date.now();
      const p = prev.current;
      setSeries((old) => {
        const next: Record<string, (number | null)[]> = {};
        for (const c of charts) {
          let v: number | null = null;
          if (c.mean) {
            const sum = sumOf(s, c.mean + "_sum"), n = sumOf(s, c.mean + "_count");
            if (p) {
              const dn = n - sumOf(p.s, c.mean + "_count");
              v = dn > 0 ? (sum - sumOf(p.s, c.mean + "_sum")) / dn : n > 0 ? sum / n : 0;
            } else v = n > 0 ? sum / n : 0;
          } else if (c.rate) v = p ? Math.max(0, (c.val!(s) - c.val!(p.s)) / ((t - p.t) / 60000)) : null;
          else v = c.val!(s);
          next[c.id] = [...(old[c.id] || []), v].slice(-60);
        }
        return next;
      });
      prev.current = { s, t };
    };
    sample();
    const iv = setInterval(sample, 3000);
    return () => {
      ac.abort();
      clearInterval(iv);
    };
  }, []);
  return (
    <Card title="Measures">
      <p class="muted">Sampled from the daemon every 3 s while this page is open.</p>
      <ErrorText error={error} />
      <div class="charts" id="charts">
        {charts.map((c) => (
          <Spark id={c.id} title={c.title} pts={series[c.id] || []} fmt={c.fmt} />
        ))}
      </div>
    </Card>
  );
}

function Overview() {
  const [sbs, setSbs] = useState<Sandbox[] | null>(null);
  const [quota, setQuota] = useState<Quota | null>(null);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    const ac = new AbortController();
    const load = () => pages<Sandbox>("/v1/sandboxes", ac.signal).then(setSbs, (e) => !ac.signal.aborted && setError(e));
    load();
    get<Quota>("/v1/quota", { signal: ac.signal }).then(setQuota, () => {});
    const iv = setInterval(load, 10000);
    return () => {
      ac.abort();
      clearInterval(iv);
    };
  }, []);
  const by: Record<string, number> = {};
  for (const s of sbs || []) by[s.state] = (by[s.state] || 0) + 1;
  const u = quota?.usage;
  const lim = (v: number, f: (n: number) => string) => (v > 0 ? " of " + f(v) : "");
  return (
    <div class="grid">
      <Card title="Sandboxes by state" id="state-counts">
        <ErrorText error={error} />
        {sbs && !sbs.length && <p class="muted">No sandboxes yet. <a href="#/sandboxes">Create one</a>.</p>}
        {sbs && sbs.length > 0 && (
          <ul class="states">
            {Object.entries(by).map(([st, n]) => (
              <li>
                <StateBadge state={st} /> {n}
              </li>
            ))}
          </ul>
        )}
      </Card>
      {quota && u && (
        <Card title={"Quota" + (quota.tenant ? " of " + quota.tenant : "")} id="quota">
          <KV
            items={[
              ["sandboxes", plural(u.sandboxes, "sandbox", "sandboxes") + lim(quota.max_sandboxes, String)],
              ["CPUs", cpus(u.cpus) + lim(quota.max_cpus, String)],
              ["memory", bytes(u.memory_bytes) + lim(quota.max_memory_bytes, bytes)],
              ["storage", bytes(u.storage_bytes) + lim(quota.max_storage_bytes, bytes)],
              ["creates", quota.create_rate_per_minute > 0 ? quota.create_rate_per_minute + " per minute" : "no limit"],
            ]}
          />
        </Card>
      )}
    </div>
  );
}

export function Dashboard() {
  const { rights } = useApp();
  return (
    <>
      <PageTitle>Dashboard</PageTitle>
      <Overview />
      {rights.host ? (
        <Measures />
      ) : (
        <p class="lead muted">The host’s measures (creates, latency, storage) are shown to the host’s administrator only.</p>
      )}
    </>
  );
}
