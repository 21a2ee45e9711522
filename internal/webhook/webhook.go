// Package webhook delivers sandbox lifecycle events to a configured URL.
// The events table is the outbox: a per-URL cursor in the store records the
// last event handled, so delivery resumes after a restart without loss.
// Delivery is at least once: a crash between a receiver's 2xx and the
// cursor's write (or a lost answer, or a change of leader) posts the event
// again, with the same X-Berth-Delivery-Id, which a receiver deduplicates
// on. Each POST carries the event as the events API writes it (the body is
// the server's encoding, Config.Encode: the package does not know the
// HTTP API's types) and an HMAC-SHA256 signature of
// the body (X-Berth-Signature: sha256=<hex>); failures are retried with
// exponential backoff and every attempt is recorded in the store.
//
// The delivery id is a hash of the URL and the stored event, so it is equal
// across attempts, restarts and replicas. On a shared store only the holder
// of the store's reconcile lease delivers (Config.Leads, checked before each
// event and each retry). Events are the outbox, so the retention sweep keeps
// a tombstone's events while the webhook's cursor is below any of them.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// Headers of a delivery.
const (
	SignatureHeader = "X-Berth-Signature"
	EventIDHeader   = "X-Berth-Event-Id"
	AttemptHeader   = "X-Berth-Delivery-Attempt"
	// DeliveryIDHeader names one event's delivery to one URL: the same
	// on every attempt, after a restart and from any replica (it is
	// derived from the stored event and the URL, see DeliveryID).
	DeliveryIDHeader = "X-Berth-Delivery-Id"
)

// DeliveryID is the id of event ev's delivery to url: a hash of the URL
// and of the event's stored id, time and sandbox, so it does not change
// between attempts or restarts, and a database started afresh (whose
// event ids begin again at 1) does not reuse one.
func DeliveryID(url string, ev *sandbox.Event) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%d\x00%s", url, ev.ID, ev.Time.UnixNano(), ev.SandboxID)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Config configures a Deliverer.
type Config struct {
	URL    string
	Secret string
	// Attempts per event before it is given up (default 6); backoff starts
	// at Backoff (default 500ms) and doubles.
	Attempts int
	Backoff  time.Duration
	// Poll is how often the outbox is read when not kicked (default 1s).
	Poll   time.Duration
	Client *http.Client
	Logger *slog.Logger
	// OnDelivery, if set, is told of every delivery attempt's outcome
	// (the daemon's metrics).
	OnDelivery func(ok bool)
	// Leads, if set, says whether this replica holds the store-wide lease
	// (package leader): replicas sharing one database deliver from one of
	// them only, checked before each event, so an event is not posted by
	// two replicas. Nil: always (one daemon).
	Leads func() bool
	// Encode makes an event's delivery body: the events API's JSON, from
	// the one conversion the HTTP API uses (the daemon passes
	// server.EventJSON), so that a webhook and GET .../events never
	// describe an event differently.
	Encode func(*sandbox.Event) ([]byte, error)
}

// Deliverer sends lifecycle events to one URL, in order.
type Deliverer struct {
	cfg  Config
	st   store.Webhooks
	kick chan struct{}

	mu                sync.Mutex
	recent            []store.WebhookDelivery // this daemon's last attempts, oldest first
	delivered, failed int64
}

// recentMax is how many attempts Status shows.
const recentMax = 20

// Status is what GET /v1/webhooks shows of the deliverer: its URL with
// credentials redacted (Redact), whether deliveries are signed (never the
// secret), the last event handled (the cursor, shared by the replicas of
// one store) and this daemon's attempts since it started, newest first.
// An error is the store's.
func (d *Deliverer) Status(ctx context.Context) (api.Webhook, error) {
	cursor, _, err := d.st.WebhookCursor(ctx, d.cfg.URL)
	if err != nil {
		return api.Webhook{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	st := api.Webhook{URL: Redact(d.cfg.URL), Signed: d.cfg.Secret != "", LastEventID: cursor,
		Delivered: d.delivered, Failed: d.failed, Recent: []api.WebhookDelivery{}}
	for i := len(d.recent) - 1; i >= 0; i-- {
		r := d.recent[i]
		st.Recent = append(st.Recent, api.WebhookDelivery{EventID: r.EventID, Attempt: r.Attempt, Status: r.Status,
			Error: r.Error, Time: r.Time})
	}
	return st, nil
}

func (d *Deliverer) note(rec store.WebhookDelivery) {
	rec.URL = Redact(rec.URL)
	d.mu.Lock()
	defer d.mu.Unlock()
	if rec.Error == "" {
		d.delivered++
	} else {
		d.failed++
	}
	d.recent = append(d.recent, rec)
	if len(d.recent) > recentMax {
		d.recent = append(d.recent[:0:0], d.recent[len(d.recent)-recentMax:]...)
	}
}

// Redact is raw without what may be a credential: the user and password
// and every query value become "redacted". The path stays: it is what
// tells one endpoint from another. Something that does not parse as a URL
// is shown as a fixed phrase.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(not a URL)"
	}
	if u.User != nil {
		u.User = url.User("redacted")
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{"redacted"}
		}
		u.RawQuery = q.Encode()
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// attemptError is an attempt's failure without the URL, which net/http
// quotes in its errors (with the password hidden, but not a user name or
// a query's token).
func attemptError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return strings.TrimSpace(ue.Op + ": " + ue.Err.Error())
	}
	return err.Error()
}

// New returns a Deliverer; Run starts it.
func New(cfg Config, st store.Webhooks) *Deliverer {
	if cfg.Attempts <= 0 {
		cfg.Attempts = 6
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 500 * time.Millisecond
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.Encode == nil {
		panic("webhook: Config.Encode is nil")
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Deliverer{cfg: cfg, st: st, kick: make(chan struct{}, 1)}
}

// Kick tells the deliverer that new events may be waiting.
func (d *Deliverer) Kick() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Sign returns the signature header value of body under secret.
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify checks a signature header value in constant time.
func Verify(secret string, body []byte, sig string) bool {
	return hmac.Equal([]byte(Sign(secret, body)), []byte(sig))
}

// Run delivers until ctx ends, while this replica leads (Config.Leads).
// A new URL starts from the newest event: it gets what happens from now
// on, not the history.
func (d *Deliverer) Run(ctx context.Context) {
	for {
		for !d.leads() {
			if !sleep(ctx, d.cfg.Poll) {
				return
			}
		}
		if !d.run(ctx) {
			return
		}
		d.cfg.Logger.Info("webhook: lease lost; another replica delivers")
	}
}

func (d *Deliverer) leads() bool { return d.cfg.Leads == nil || d.cfg.Leads() }

// run delivers while this replica leads, from the stored cursor (which
// another replica may have moved on while it led). It returns false when
// ctx ended, true when the lead was lost.
func (d *Deliverer) run(ctx context.Context) bool {
	cursor, ok, err := d.st.WebhookCursor(ctx, d.cfg.URL)
	for err != nil {
		d.cfg.Logger.Error("webhook: reading cursor", "err", err)
		if !sleep(ctx, d.cfg.Poll) {
			return false
		}
		cursor, ok, err = d.st.WebhookCursor(ctx, d.cfg.URL)
	}
	if !ok {
		cursor = d.latest(ctx)
		if err := d.st.SetWebhookCursor(ctx, d.cfg.URL, cursor); err != nil {
			d.cfg.Logger.Error("webhook: storing cursor", "err", err)
		}
	}
	for {
		evs, err := d.st.ListEventsSince(ctx, cursor, 100)
		if err != nil {
			d.cfg.Logger.Error("webhook: reading events", "err", err)
		}
		for _, ev := range evs {
			if !d.leads() {
				return true
			}
			if ev.Type == "state" {
				switch d.deliver(ctx, ev) {
				case stopped:
					return false
				case deposed:
					return true // the cursor stays: the new leader posts it
				}
			}
			cursor = ev.ID
			// Recorded even if we are shutting down: what was delivered
			// must not be sent again after a restart.
			if err := d.st.SetWebhookCursor(context.WithoutCancel(ctx), d.cfg.URL, cursor); err != nil {
				d.cfg.Logger.Error("webhook: storing cursor", "err", err)
			}
		}
		if len(evs) == 100 {
			continue
		}
		select {
		case <-ctx.Done():
			return false
		case <-d.kick:
		case <-time.After(d.cfg.Poll):
		}
		if !d.leads() {
			return true
		}
	}
}

func (d *Deliverer) latest(ctx context.Context) int64 {
	var last int64
	for {
		evs, err := d.st.ListEventsSince(ctx, last, 1000)
		if err != nil || len(evs) == 0 {
			return last
		}
		last = evs[len(evs)-1].ID
	}
}

// outcome is how a delivery ended: handled (accepted, or given up on: the
// cursor moves past it), stopped (ctx ended) or deposed (the lead was lost
// between attempts: the cursor stays).
type outcome int

const (
	handled outcome = iota
	stopped
	deposed
)

// deliver posts ev until it is accepted or attempts run out.
func (d *Deliverer) deliver(ctx context.Context, ev *sandbox.Event) outcome {
	body, err := d.cfg.Encode(ev)
	if err != nil { // nothing a retry would change: given up, and said
		d.cfg.Logger.Error("webhook: encoding event", "event", ev.ID, "err", err)
		return handled
	}
	backoff := d.cfg.Backoff
	for attempt := 1; attempt <= d.cfg.Attempts; attempt++ {
		if attempt > 1 && !d.leads() {
			return deposed
		}
		status, err := d.post(ctx, ev.ID, DeliveryID(d.cfg.URL, ev), attempt, body)
		if d.cfg.OnDelivery != nil && ctx.Err() == nil {
			d.cfg.OnDelivery(err == nil)
		}
		rec := &store.WebhookDelivery{EventID: ev.ID, URL: d.cfg.URL, Attempt: attempt, Status: status, Time: time.Now().UTC()}
		if err != nil {
			rec.Error = attemptError(err)
		}
		d.note(*rec)
		if rerr := d.st.RecordWebhookDelivery(context.WithoutCancel(ctx), rec); rerr != nil {
			d.cfg.Logger.Error("webhook: recording delivery", "err", rerr)
		}
		if err == nil {
			return handled
		}
		if ctx.Err() != nil {
			return stopped
		}
		d.cfg.Logger.Warn("webhook delivery failed", "event", ev.ID, "attempt", attempt, "err", err)
		if attempt < d.cfg.Attempts && !sleep(ctx, backoff) {
			return stopped
		}
		backoff *= 2
	}
	d.cfg.Logger.Error("webhook: giving up on event", "event", ev.ID, "attempts", d.cfg.Attempts)
	return handled
}

func (d *Deliverer) post(ctx context.Context, id int64, delivery string, attempt int, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "berth-webhook/1")
	req.Header.Set(EventIDHeader, strconv.FormatInt(id, 10))
	req.Header.Set(AttemptHeader, strconv.Itoa(attempt))
	req.Header.Set(DeliveryIDHeader, delivery)
	if d.cfg.Secret != "" {
		req.Header.Set(SignatureHeader, Sign(d.cfg.Secret, body))
	}
	resp, err := d.cfg.Client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("status %d", resp.StatusCode)
	}
	return resp.StatusCode, nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
