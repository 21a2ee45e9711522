package sqlite

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"
	"time"
)

// checkpointEvery is how often the WAL is checkpointed.
const checkpointEvery = 500 * time.Millisecond

// truncatePages is the WAL size (in pages) past which a checkpoint also
// truncates it: readers that never let a passive checkpoint finish must
// not make it grow without bound.
const truncatePages = 16384

// checkpointer copies the WAL into the database file in the background
// (PRAGMA wal_checkpoint(PASSIVE): it waits for no reader and no writer),
// so that no committing write pays for it: with SQLite's automatic
// checkpoint, the transaction that crosses 1,000 pages copies them and
// fsyncs the database file before its commit returns, and under a burst
// of creates that one group commit held every waiting write for tens of
// milliseconds. On close the WAL is checkpointed and truncated.
type checkpointer struct {
	db   *sql.DB
	done chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

func startCheckpointer(db *sql.DB, every time.Duration) *checkpointer {
	c := &checkpointer{db: db, done: make(chan struct{})}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-c.done:
				return
			case <-t.C:
				if _, err := c.checkpoint(context.Background(), false); err != nil {
					slog.Debug("sqlite store: checkpoint", "err", err)
				}
			}
		}
	}()
	return c
}

// checkpoint runs one passive checkpoint (truncating when the WAL has
// grown past truncatePages, or when truncate is asked) and reports the
// WAL's size in pages before it.
func (c *checkpointer) checkpoint(ctx context.Context, truncate bool) (walPages int, err error) {
	var busy, logPages, done int
	mode := "PASSIVE"
	if truncate {
		mode = "TRUNCATE"
	}
	if err := c.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &logPages, &done); err != nil {
		return 0, err
	}
	if !truncate && logPages > truncatePages {
		return c.checkpoint(ctx, true)
	}
	return logPages, nil
}

// stop ends the background checkpoints and truncates the WAL once more.
func (c *checkpointer) stop() {
	c.once.Do(func() {
		close(c.done)
		c.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = c.checkpoint(ctx, true)
	})
}
