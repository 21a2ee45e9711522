package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// fill writes about mib MiB through db in transactions of 256 KiB.
func fill(t *testing.T, db *sql.DB, mib int) {
	t.Helper()
	row := strings.Repeat("x", 4096)
	for range mib * 4 {
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for range 64 {
			if _, err := tx.Exec(`INSERT INTO filler (v) VALUES (?)`, row); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

func walSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// The writer never checkpoints: a commit that crosses SQLite's automatic
// threshold (1,000 pages) does not copy the WAL into the database and
// fsync it before returning; the WAL grows instead, until the
// checkpointer, off the write path, copies it and the writer starts the
// WAL again from its beginning. Closing truncates it.
func TestCheckpointsOffTheWritePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.db")
	if err := ensureFile(path); err != nil {
		t.Fatal(err)
	}
	w, err := sql.Open("sqlite", path+"?"+writeDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.SetMaxOpenConns(1)
	if _, err := w.Exec(`CREATE TABLE filler (id INTEGER PRIMARY KEY, v TEXT)`); err != nil {
		t.Fatal(err)
	}
	fill(t, w, 8) // ~2,000 pages: twice the automatic threshold
	if n := walSize(t, path); n < 7<<20 {
		t.Fatalf("after 8 MiB of commits the WAL is %d bytes: the writer checkpointed it", n)
	}

	cp, err := sql.Open("sqlite", path+"?"+checkpointDSN)
	if err != nil {
		t.Fatal(err)
	}
	cp.SetMaxOpenConns(1)
	ck := startCheckpointer(cp, 10*time.Millisecond)
	defer cp.Close()
	// Once a checkpoint has copied the whole WAL, the next commit writes
	// it again from its beginning: a MiB more leaves the file (8 MiB)
	// no larger.
	deadline := time.Now().Add(time.Minute)
	for {
		time.Sleep(50 * time.Millisecond) // the checkpointer's turn
		before := walSize(t, path)
		fill(t, w, 1)
		if walSize(t, path) == before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the WAL kept growing (now %d bytes): no checkpoint completed", walSize(t, path))
		}
	}
	ck.stop()
	if n := walSize(t, path); n != 0 {
		t.Fatalf("after the checkpointer stopped the WAL holds %d bytes, want it truncated", n)
	}
	var rows int
	if err := w.QueryRow(`SELECT count(*) FROM filler`).Scan(&rows); err != nil || rows == 0 {
		t.Fatalf("rows after the checkpoints: %d %v", rows, err)
	}
}

// A store closed and opened again keeps what was written, with the WAL
// checkpointed into the database file at close.
func TestCloseCheckpoints(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "berth.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		cycle(ctx, t, s, i, time.Now())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() != 0 {
		t.Fatalf("the WAL holds %d bytes after close, want it checkpointed and truncated", fi.Size())
	}
	s, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sb, err := s.GetSandbox(ctx, store.AnyOwner, "00000000000000c7")
	if err != nil || sb.State != sandbox.StateDeleted {
		t.Fatalf("the last cycle's record after reopening: %+v %v", sb, err)
	}
}
