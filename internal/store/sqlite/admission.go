package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// tenantLock is SQLite's sqlstore.Dialect.TenantLock. SQLite serialises
// writers, but the usage count is read before the insert, so two processes
// on one file (or two handles in one) could both count under the limit.
// The lock is an open-file-description byte-range lock on one byte of
// path (a file beside the database) chosen by a hash of the tenant: it
// conflicts between handles of one process as well as between processes,
// different tenants wait for each other only on a hash collision, and the
// kernel drops it if the holder dies.
func tenantLock(path string) func(ctx context.Context, _ *sql.DB, tenant string) (func(), error) {
	return func(ctx context.Context, _ *sql.DB, tenant string) (func(), error) {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil, fmt.Errorf("admission lock of tenant %q: %w", tenant, err)
		}
		h := fnv.New32a()
		_, _ = io.WriteString(h, tenant)
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: int64(h.Sum32()), Len: 1}
		for {
			err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
			if err == nil {
				return func() { f.Close() }, nil // closing the description releases the lock
			}
			if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
				f.Close()
				return nil, fmt.Errorf("admission lock of tenant %q: %w", tenant, err)
			}
			select {
			case <-ctx.Done():
				f.Close()
				return nil, fmt.Errorf("admission lock of tenant %q: %w", tenant, ctx.Err())
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
}
