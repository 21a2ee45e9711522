package postgres

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx" for the admin connection

	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/migrations"
	"github.com/berth-sh/berth/internal/store/sqlstore"
	"github.com/berth-sh/berth/internal/store/storetest"
)

// The tests need a PostgreSQL server. BERTH_TEST_POSTGRES_URL names one (its
// user must be allowed to CREATE DATABASE); without it the tests start a
// private throwaway cluster with scripts/pg-test-server.sh (installing
// Debian's postgresql if needed) on first use and stop it in TestMain. That
// needs root. A missing server fails the tests, never skips them: a run
// without PostgreSQL has not tested this store. Each test works in its own
// fresh database.
const urlEnv = "BERTH_TEST_POSTGRES_URL"

var server struct {
	once  sync.Once
	url   string
	err   error
	stop  func() // nil unless this process started the server
	admin *sql.DB
}

func TestMain(m *testing.M) {
	code := m.Run()
	if server.admin != nil {
		server.admin.Close()
	}
	if server.stop != nil {
		server.stop()
	}
	os.Exit(code)
}

// serverURL returns the server's URL, starting the private one on first use.
func serverURL(t *testing.T) string {
	t.Helper()
	server.once.Do(func() {
		if u := os.Getenv(urlEnv); u != "" {
			server.url = u
		} else {
			// Root runs the cluster as user postgres, anyone else as
			// themselves (pg-test-server.sh installs the server only as root).
			server.url, server.stop, server.err = startPrivateServer()
			if server.err != nil {
				return
			}
		}
		server.admin, server.err = sql.Open("pgx", server.url)
		if server.err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			server.err = server.admin.PingContext(ctx)
		}
		if server.err != nil {
			server.err = fmt.Errorf("connect to the test server: %w", server.err)
		}
	})
	if server.err != nil {
		t.Fatalf("no PostgreSQL to test against: %v (make deps, i.e. scripts/install-deps.sh, installs PostgreSQL)", server.err)
	}
	return server.url
}

// repoRoot finds the module root from this file's path, or else from the
// working directory (the package directory under go test).
func repoRoot() (string, error) {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, dir := range starts {
		for d := dir; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				return d, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", errors.New("cannot find the repository root (go.mod)")
}

const privatePrefix = "/tmp/berth-pg-test-"

// startPrivateServer starts a cluster of this test process's own, in
// /tmp/berth-pg-test-<pid>, first stopping any left by a test process that
// died before its TestMain could.
func startPrivateServer() (string, func(), error) {
	root, err := repoRoot()
	if err != nil {
		return "", nil, err
	}
	script := filepath.Join(root, "scripts", "pg-test-server.sh")
	run := func(dir string, timeout time.Duration, arg string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, script, arg)
		cmd.Env = append(os.Environ(), "BERTH_PG_TEST_DIR="+dir)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		// The server inherits neither: pg_ctl redirects it to its log.
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("%s %s: %w\n%s", script, arg, err, strings.TrimSpace(stderr.String()))
		}
		return strings.TrimSpace(stdout.String()), nil
	}

	stale, _ := filepath.Glob(privatePrefix + "*")
	pidRE := regexp.MustCompile(`^` + regexp.QuoteMeta(privatePrefix) + `(\d+)$`)
	for _, dir := range stale {
		m := pidRE.FindStringSubmatch(dir)
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		if pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		if _, err := run(dir, time.Minute, "stop"); err != nil {
			fmt.Fprintf(os.Stderr, "postgres test: removing stale %s: %v\n", dir, err)
		}
	}

	dir := privatePrefix + strconv.Itoa(os.Getpid())
	// Installing the package can take a while on a cold apt cache.
	u, err := run(dir, 10*time.Minute, "start")
	if err != nil {
		_, _ = run(dir, time.Minute, "stop")
		return "", nil, err
	}
	if !strings.HasPrefix(u, "postgres://") {
		_, _ = run(dir, time.Minute, "stop")
		return "", nil, fmt.Errorf("%s start printed %q, want a postgres:// URL", script, u)
	}
	return u, func() {
		if _, err := run(dir, time.Minute, "stop"); err != nil {
			fmt.Fprintf(os.Stderr, "postgres test: %v\n", err)
		}
	}, nil
}

// newDatabase creates an empty database for t, dropped when t ends, and
// returns its URL.
func newDatabase(t *testing.T) string {
	t.Helper()
	base := serverURL(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "berth_test_" + hex.EncodeToString(b)
	ctx := context.Background()
	if _, err := server.admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if _, err := server.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s is not a URL: %v", urlEnv, err)
	}
	u.Path = "/" + name
	return u.String()
}

func open(t *testing.T, u string) store.Store {
	t.Helper()
	s, err := Open(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func rawDB(t *testing.T, u string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, newDatabase(t))
	})
}

// TestShared runs the two-daemon cases: two Opens (two pools) on one database.
func TestShared(t *testing.T) {
	storetest.RunShared(t, func(t *testing.T) (store.Store, store.Store) {
		u := newDatabase(t)
		a := open(t, u)
		b, err := Open(t.Context(), u)
		if err != nil {
			a.Close()
			t.Fatal(err)
		}
		return a, b
	})
}

type migrationRow struct {
	Version int
	Name    string
}

func migrationRows(t *testing.T, db *sql.DB) []migrationRow {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT version, name FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []migrationRow
	for rows.Next() {
		var r migrationRow
		if err := rows.Scan(&r.Version, &r.Name); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func wantCurrentSchema(t *testing.T, db *sql.DB) {
	t.Helper()
	ms, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	got := migrationRows(t, db)
	if len(got) != len(ms) {
		t.Fatalf("schema_migrations = %v, want the %d embedded migrations once each", got, len(ms))
	}
	for i, m := range ms {
		if got[i] != (migrationRow{m.Version, m.Name}) {
			t.Errorf("schema_migrations[%d] = %v, want %d %s", i, got[i], m.Version, m.Name)
		}
	}
}

// TestConcurrentMigrate starts several daemons at once on one fresh
// database: the advisory lock makes one migrate and the others find it done.
// Without it, concurrent CREATE TABLE IF NOT EXISTS alone fails with a
// unique violation in the catalog.
func TestConcurrentMigrate(t *testing.T) {
	const daemons = 6
	for round := range 3 {
		u := newDatabase(t)
		var (
			wg     sync.WaitGroup
			start  = make(chan struct{})
			stores = make([]store.Store, daemons)
			errs   = make([]error, daemons)
		)
		for i := range daemons {
			wg.Go(func() {
				<-start
				stores[i], errs[i] = Open(t.Context(), u)
			})
		}
		close(start)
		wg.Wait()
		for i, s := range stores {
			if s != nil {
				t.Cleanup(func() { s.Close() })
			}
			if errs[i] != nil {
				t.Errorf("round %d: daemon %d: Open: %v", round, i, errs[i])
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		wantCurrentSchema(t, rawDB(t, u))
		// Every daemon works on the shared schema.
		sb := &sandbox.Sandbox{ID: fmt.Sprintf("m%d", round), Tenant: "t", State: sandbox.StateCreating}
		if err := stores[0].CreateSandbox(t.Context(), sb); err != nil {
			t.Fatal(err)
		}
		if _, err := stores[daemons-1].GetSandbox(t.Context(), store.AnyOwner, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReopenKeepsDataAndMigratesOnce(t *testing.T) {
	ctx := t.Context()
	u := newDatabase(t)
	s := open(t, u)
	sb := &sandbox.Sandbox{ID: "keep", Tenant: "t", Name: "keep", State: sandbox.StateRunning, CreatedAt: time.Now()}
	if err := s.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db := rawDB(t, u)
	wantCurrentSchema(t, db)

	s = open(t, u)
	defer s.Close()
	got, err := s.GetSandbox(ctx, store.AnyOwner, "keep")
	if err != nil || got.Name != "keep" || got.Generation != 1 {
		t.Errorf("reopened record = %+v, %v", got, err)
	}
	wantCurrentSchema(t, db)
	applied, err := sqlstore.Migrate(ctx, db, dialect)
	if err != nil || len(applied) != 0 {
		t.Errorf("Migrate on a current database applied %v, err %v", applied, err)
	}
}

// TestRefusesNewerSchema: a database migrated by a newer berth is left alone.
func TestRefusesNewerSchema(t *testing.T) {
	ctx := t.Context()
	u := newDatabase(t)
	s := open(t, u)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db := rawDB(t, u)
	future := migrations.Latest() + 1
	if _, err := db.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, 'from_the_future', 0)`, future); err != nil {
		t.Fatal(err)
	}
	before := migrationRows(t, db)

	s, err := Open(ctx, u)
	if err == nil {
		s.Close()
		t.Fatal("Open of a newer schema succeeded")
	}
	if !errors.Is(err, sqlstore.ErrSchemaTooNew) {
		t.Errorf("err = %v, want ErrSchemaTooNew", err)
	}
	if !strings.Contains(err.Error(), strconv.Itoa(future)) {
		t.Errorf("err %q does not name version %d", err, future)
	}
	if after := migrationRows(t, db); len(after) != len(before) {
		t.Errorf("refused Open changed schema_migrations: %v -> %v", before, after)
	}
}

// TestRefusesForeignHistory: a database whose recorded migration differs
// from this binary's is refused.
func TestRefusesForeignHistory(t *testing.T) {
	ctx := t.Context()
	u := newDatabase(t)
	if err := open(t, u).Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := rawDB(t, u).ExecContext(ctx, `UPDATE schema_migrations SET name = 'something_else' WHERE version = 1`); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(ctx, u); err == nil {
		s.Close()
		t.Fatal("Open of a database with a foreign migration history succeeded")
	} else if !strings.Contains(err.Error(), "incompatible") {
		t.Errorf("err = %v, want it to say the history is incompatible", err)
	}
}

func TestOpenErrorsHideThePassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for _, u := range []string{
		"postgres://berth:s3cretpw@127.0.0.1:1/berth?sslmode=disable&connect_timeout=5", // nothing listens
		"postgres://berth:s3cretpw@127.0.0.1:notaport/berth",
		"postgres://berth:s3cretpw@127.0.0.1:5432/berth?pool_max_conns=many",
		"host=127.0.0.1 port=1 user=berth password=s3cretpw sslmode=disable connect_timeout=5",
	} {
		s, err := Open(ctx, u)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", u)
			continue
		}
		if strings.Contains(err.Error(), "s3cretpw") {
			t.Errorf("Open error leaks the password: %v", err)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want sqlstore.Violation
	}{
		{nil, sqlstore.NoViolation},
		{errors.New("boom"), sqlstore.NoViolation},
		{&pgconn.PgError{Code: "23505"}, sqlstore.UniqueViolation},
		{fmt.Errorf("insert: %w", &pgconn.PgError{Code: "23505"}), sqlstore.UniqueViolation},
		{&pgconn.PgError{Code: "23503"}, sqlstore.ForeignKeyViolation},
		{&pgconn.PgError{Code: "23502"}, sqlstore.NoViolation}, // not null
		{&pgconn.PgError{Code: "40001"}, sqlstore.NoViolation},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("classify(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
