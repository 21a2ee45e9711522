// Webhooks: the endpoint the daemon posts lifecycle events to (berth serve
// --webhook-url), for the host's administrator — its URL with credentials
// redacted by the daemon, whether it signs, never the secret — and the
// recent deliveries. Read-only: the endpoint is the daemon's configuration.
import { get } from "../api";
import { useApp } from "../app";
import { Card, ErrorText, KV, Loading, Notice, PageTitle, Table, useLoad } from "../components/ui";
import { ago, when } from "../format";
import type { Webhook } from "../types";

export function Webhooks() {
  const { rights } = useApp();
  const w = useLoad((signal) => (rights.host ? get<Webhook[]>("/v1/webhooks", { signal }) : Promise.resolve([])), []);
  if (!rights.host) {
    return (
      <>
        <PageTitle>Webhooks</PageTitle>
        <Notice id="denied">The webhook is the host’s configuration: only the host’s administrator sees it.</Notice>
      </>
    );
  }
  return (
    <>
      <PageTitle>Webhooks</PageTitle>
      <p class="lead muted">
        The daemon posts every sandbox state change to these endpoints, signed with the secret when one is set. They are set
        when the daemon starts (<code>berth serve --webhook-url URL --webhook-secret S</code>).
      </p>
      <ErrorText error={w.error} />
      {w.loading ? (
        <Loading />
      ) : !w.data?.length ? (
        <Card>
          <p id="no-webhooks">No webhook is configured.</p>
        </Card>
      ) : (
        w.data.map((h, i) => (
          <Card title={"Endpoint " + (i + 1)} id={"webhook-" + i} actions={<button type="button" class="act small" onClick={w.reload}>Refresh</button>}>
            <KV
              items={[
                ["URL", <code class="wrap" id={"webhook-url-" + i}>{h.url}</code>],
                ["signed", h.signed ? "yes (X-Berth-Signature, HMAC-SHA256)" : "no: no secret is set"],
                ["last event handled", h.last_event_id ? "#" + h.last_event_id : "none yet"],
                ["attempts since the daemon started", h.delivered + " delivered, " + h.failed + " failed"],
              ]}
            />
            <Table
              id={"webhook-deliveries-" + i}
              caption="Recent delivery attempts"
              rows={h.recent}
              empty="no delivery attempt yet"
              cols={[
                { label: "when", get: (d) => <span title={when(d.time)}>{ago(d.time)}</span> },
                { label: "event", get: (d) => "#" + d.event_id },
                { label: "attempt", get: (d) => d.attempt },
                { label: "outcome", get: (d) => <span class={"decision " + (d.error ? "deny" : "allow")}>{d.error ? "failed" : "delivered"}</span> },
                { label: "answer", wrap: true, get: (d) => (d.status ? "HTTP " + d.status : "") + (d.error ? (d.status ? " — " : "") + d.error : "") },
              ]}
            />
          </Card>
        ))
      )}
    </>
  );
}
