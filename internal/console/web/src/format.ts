// Values as a person reads them: sizes in KiB/MiB/GiB, durations in
// words, times relative and absolute, states in plain words.

export function bytes(n: number | undefined | null): string {
  if (n === undefined || n === null) return "";
  const u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  let v = n;
  while (Math.abs(v) >= 1024 && i < u.length - 1) {
    v /= 1024;
    i++;
  }
  const s = i === 0 ? String(v) : v >= 100 || Number.isInteger(v) ? v.toFixed(0) : v.toFixed(1);
  return s + " " + u[i];
}

/** A duration in seconds as words: "45 s", "12 min", "3 h 05 min", "2 days 4 h". */
export function duration(sec: number | undefined | null): string {
  if (sec === undefined || sec === null || !isFinite(sec)) return "";
  const s = Math.max(0, Math.round(sec));
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min" + (s % 60 && s < 600 ? " " + (s % 60) + " s" : "");
  if (s < 86400) {
    const m = Math.floor((s % 3600) / 60);
    return Math.floor(s / 3600) + " h" + (m ? " " + String(m).padStart(2, "0") + " min" : "");
  }
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  return d + (d === 1 ? " day" : " days") + (h ? " " + h + " h" : "");
}

/** How long ago t was, in words ("3 min ago"); "" for none. */
export function ago(t: string | undefined | null, now = Date.now()): string {
  if (!t) return "";
  const ms = now - new Date(t).getTime();
  if (ms < 0) return "in " + duration(-ms / 1000);
  if (ms < 5000) return "just now";
  return duration(ms / 1000) + " ago";
}

/** A time in the reader's locale; "" for none. */
export function when(t: string | undefined | null): string {
  return t ? new Date(t).toLocaleString() : "";
}

export function cpus(n: number | undefined): string {
  if (n === undefined || n === null) return "";
  return n === 1 ? "1 CPU" : n + " CPUs";
}

/** A state word for a person (the API's word, spaced and lower case). */
const stateWords: Record<string, string> = {
  creating: "starting up",
  running: "running",
  paused: "paused",
  stopping: "stopping",
  stopped: "stopped",
  starting: "starting",
  deleting: "deleting",
  deleted: "deleted",
  failed: "failed",
  quarantined: "quarantined",
};
export const stateWord = (s: string) => stateWords[s] || s;

export const labelsText = (l: Record<string, string> | undefined) =>
  Object.entries(l || {})
    .map(([k, v]) => k + "=" + v)
    .join(" ");

export const plural = (n: number, one: string, many = one + "s") => n + " " + (n === 1 ? one : many);
