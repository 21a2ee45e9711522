// A small hand-made SVG line chart of a series sampled while a page is
// open (no chart library: a polyline scaled to its maximum, its current
// value in words beside it, and that value as the image's accessible
// name).

export function Spark(props: { id: string; title: string; pts: (number | null)[]; fmt: (v: number) => string; max?: number; note?: string }) {
  const ys = props.pts.filter((p): p is number => p !== null);
  const max = Math.max(1e-9, props.max ?? 0, ...ys);
  const step = 300 / Math.max(1, props.pts.length - 1);
  const coords = props.pts
    .map((p, i) => (p === null ? null : (i * step).toFixed(1) + "," + (88 - (p / max) * 84).toFixed(1)))
    .filter(Boolean)
    .join(" ");
  const cur = ys.length ? props.fmt(ys[ys.length - 1]) : "—";
  return (
    <figure class="chart" data-chart={props.id}>
      <figcaption class="muted">{props.title}</figcaption>
      <div class="val">{cur}</div>
      <svg viewBox="0 0 300 90" preserveAspectRatio="none" role="img" aria-label={props.title + ": " + cur}>
        <line x1="0" y1="89" x2="300" y2="89" />
        {ys.length > 1 && <polyline points={coords} />}
      </svg>
      <div class="muted max">{props.note ?? (ys.length ? "max " + props.fmt(props.max ?? Math.max(...ys)) : "")}</div>
    </figure>
  );
}
