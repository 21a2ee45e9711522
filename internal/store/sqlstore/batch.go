package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
)

// Group commit. A store whose database has one writer (SQLite: every
// write takes the database's lock) runs its write transactions one after
// another; each pays its BEGIN and COMMIT and a hand-over of the one
// connection between goroutines, and under a burst of creates (a create
// and its first exec are about nine transactions: idempotency key, audit
// begin and outcome, the running record, the lease) the writers queue for
// the connection, not for the database's work. With Dialect.GroupCommit,
// the writes waiting when the writer is free run together in one
// transaction, each inside a savepoint of its own: a write that fails is
// rolled back to its savepoint and fails alone, the others commit
// together. No library does this for database/sql; it is small, so it is
// written here.
//
// A write runs with its caller's context values but never its
// cancellation (context.WithoutCancel): a cancelled statement interrupts
// the connection, and SQLite then rolls back the whole transaction, the
// batch's other writes with it. A caller whose context ends before its
// write starts gets the context's error and nothing is written; once
// started, the write finishes and its caller gets its result.
//
// When a batch cannot go on (its BEGIN, a savepoint or the COMMIT fails,
// or a write's rollback to its savepoint fails: the database rolled the
// whole transaction back), every write of the batch fails with that error
// and none of them is kept: the transaction is rolled back, and no
// statement runs outside it.

// maxBatch bounds the writes of one transaction.
const maxBatch = 64

// batchOp is one write waiting for, or run by, a batch.
type batchOp struct {
	ctx    context.Context
	events bool
	fn     func(ctx context.Context, tx *sql.Tx) error
	err    error
	done   chan struct{}
}

// batcher queues writes; the writer that finds no batch running runs
// batches until its own write is done, then hands the rest to a goroutine.
type batcher struct {
	mu      sync.Mutex
	pending []*batchOp
	running bool
}

// inBatch runs fn as one write of a batch (GroupCommit) and returns its
// result.
func (s *sqlStore) inBatch(ctx context.Context, events bool, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	op := &batchOp{ctx: ctx, events: events, fn: fn, done: make(chan struct{})}
	b := &s.batch
	b.mu.Lock()
	b.pending = append(b.pending, op)
	lead := !b.running
	if lead {
		b.running = true
	}
	b.mu.Unlock()
	if lead {
		s.runBatches(op)
	}
	<-op.done
	return op.err
}

// runBatches runs batches until mine is done (or, with mine nil, until
// none is pending), then passes the lead on if writes still wait.
func (s *sqlStore) runBatches(mine *batchOp) {
	b := &s.batch
	for {
		b.mu.Lock()
		n := min(len(b.pending), maxBatch)
		ops := b.pending[:n:n]
		b.pending = b.pending[n:]
		if n == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		s.runBatch(ops)
		if mine != nil && isDone(mine) {
			b.mu.Lock()
			if len(b.pending) == 0 {
				b.running = false
				b.mu.Unlock()
				return
			}
			b.mu.Unlock()
			go s.runBatches(nil) // the lead goes on without this caller
			return
		}
	}
}

func isDone(op *batchOp) bool {
	select {
	case <-op.done:
		return true
	default:
		return false
	}
}

// runBatch runs ops in one transaction and tells each its result.
func (s *sqlStore) runBatch(ops []*batchOp) {
	var (
		ran    []*batchOp // committed with the transaction
		events bool
	)
	finish := func(fail error) {
		for _, op := range ran {
			if fail != nil {
				op.err = fail
			} else if op.events {
				events = true
			}
		}
		for _, op := range ops {
			close(op.done)
		}
		if fail == nil && events {
			s.written.fire()
		}
	}
	bg := context.Background()
	tx, err := s.w.BeginTx(bg, nil)
	if err != nil {
		for _, op := range ops {
			op.err = fmt.Errorf("begin: %w", err)
		}
		finish(nil)
		return
	}
	broken := func(err error) {
		_ = tx.Rollback()
		for _, op := range ops {
			if op.err == nil {
				op.err = err
			}
		}
		ran = nil
		finish(nil)
	}
	for _, op := range ops {
		if err := op.ctx.Err(); err != nil {
			op.err = err // never started: nothing written
			continue
		}
		if _, err := s.txExec(bg, tx, "SAVEPOINT w"); err != nil {
			broken(fmt.Errorf("savepoint: %w", err))
			return
		}
		if err := op.fn(context.WithoutCancel(op.ctx), tx); err != nil {
			op.err = err
			if _, rerr := s.txExec(bg, tx, "ROLLBACK TO w"); rerr != nil {
				// The database ended the transaction itself: the
				// batch's other writes went with it.
				broken(errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rerr)))
				return
			}
			if _, rerr := s.txExec(bg, tx, "RELEASE w"); rerr != nil {
				broken(fmt.Errorf("release savepoint: %w", rerr))
				return
			}
			continue
		}
		if _, err := s.txExec(bg, tx, "RELEASE w"); err != nil {
			broken(fmt.Errorf("release savepoint: %w", err))
			return
		}
		ran = append(ran, op)
	}
	if err := tx.Commit(); err != nil {
		finish(fmt.Errorf("commit: %w", err))
		return
	}
	finish(nil)
}
