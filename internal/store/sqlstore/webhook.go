package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

func (s *sqlStore) ListEventsSince(ctx context.Context, afterID int64, limit int) ([]*sandbox.Event, error) {
	if limit <= 0 {
		limit = 1000
	}
	rows, err := s.query(ctx, `SELECT id, sandbox_id, at, type, from_state, to_state, actor, cause, reason, outcome, message
		FROM events WHERE id > ? ORDER BY id LIMIT ?`, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list events since %d: %w", afterID, err)
	}
	defer rows.Close()
	var out []*sandbox.Event
	for rows.Next() {
		var (
			ev              sandbox.Event
			at              int64
			from, to, cause string
		)
		if err := rows.Scan(&ev.ID, &ev.SandboxID, &at, &ev.Type, &from, &to, &ev.Actor, &cause,
			&ev.Reason, &ev.Outcome, &ev.Message); err != nil {
			return nil, err
		}
		ev.Time = fromMicros(at)
		ev.From, ev.To, ev.Cause = sandbox.State(from), sandbox.State(to), sandbox.Cause(cause)
		out = append(out, &ev)
	}
	return out, rows.Err()
}

func (s *sqlStore) WebhookCursor(ctx context.Context, url string) (int64, bool, error) {
	var id int64
	err := s.queryRow(ctx, `SELECT event_id FROM webhook_cursors WHERE url = ?`, url).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("webhook cursor: %w", err)
	}
	return id, true, nil
}

// SetWebhookCursor moves url's cursor forward to eventID, never back: a
// deliverer that stalled and woke after another replica took over (its
// lease lost) cannot rewind the cursor into duplicate deliveries.
func (s *sqlStore) SetWebhookCursor(ctx context.Context, url string, eventID int64) error {
	if _, err := s.exec(ctx, `INSERT INTO webhook_cursors (url, event_id) VALUES (?, ?)
		ON CONFLICT (url) DO UPDATE SET event_id = excluded.event_id WHERE webhook_cursors.event_id < excluded.event_id`,
		url, eventID); err != nil {
		return fmt.Errorf("webhook cursor: %w", err)
	}
	return nil
}

func (s *sqlStore) RecordWebhookDelivery(ctx context.Context, d *store.WebhookDelivery) error {
	err := s.w.QueryRowContext(ctx, s.d.rebind(`INSERT INTO webhook_deliveries (event_id, url, attempt, status, error, at)
		VALUES (?, ?, ?, ?, ?, ?) RETURNING id`), d.EventID, d.URL, d.Attempt, d.Status, d.Error, micros(d.Time)).Scan(&d.ID)
	if err != nil {
		return fmt.Errorf("record webhook delivery: %w", err)
	}
	return nil
}

func (s *sqlStore) ListWebhookDeliveries(ctx context.Context, eventID int64) ([]*store.WebhookDelivery, error) {
	rows, err := s.query(ctx, `SELECT id, event_id, url, attempt, status, error, at FROM webhook_deliveries
		WHERE event_id = ? ORDER BY id`, eventID)
	if err != nil {
		return nil, fmt.Errorf("list webhook deliveries: %w", err)
	}
	defer rows.Close()
	var out []*store.WebhookDelivery
	for rows.Next() {
		var d store.WebhookDelivery
		var at int64
		if err := rows.Scan(&d.ID, &d.EventID, &d.URL, &d.Attempt, &d.Status, &d.Error, &at); err != nil {
			return nil, err
		}
		d.Time = fromMicros(at)
		out = append(out, &d)
	}
	return out, rows.Err()
}
