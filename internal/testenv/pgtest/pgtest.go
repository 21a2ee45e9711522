// Package pgtest gives tests outside the store a real PostgreSQL: the
// private throwaway cluster of scripts/pg-test-server.sh (Debian's
// postgresql, installed when missing; needs root), one per test process,
// or the server BERTH_TEST_POSTGRES_URL names. Each call of Database makes
// a fresh database dropped when the test ends. A missing server fails the
// test, never skips it. Call Stop from TestMain.
package pgtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/testenv"

	_ "github.com/jackc/pgx/v5/stdlib" // the admin connection's driver
)

// URLEnv names an existing server whose user may CREATE DATABASE.
const URLEnv = "BERTH_TEST_POSTGRES_URL"

var server struct {
	once  sync.Once
	url   string
	dir   string // the private cluster's, if this process started one
	err   error
	admin *sql.DB
}

// script is scripts/pg-test-server.sh of the module (found as
// testenv.RepoRoot finds it: a -trimpath build has no absolute file names).
func script() string {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "scripts/pg-test-server.sh"
	}
	return filepath.Join(root, "scripts", "pg-test-server.sh")
}

func run(dir, arg string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, script(), arg)
	cmd.Env = append(os.Environ(), "BERTH_PG_TEST_DIR="+dir)
	// Files, not pipes: the server keeps inherited descriptors open.
	out, err := os.CreateTemp("", "berth-pgtest-")
	if err != nil {
		return "", err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w\n%s", script(), arg, err, strings.TrimSpace(stderr.String()))
	}
	b, err := os.ReadFile(out.Name())
	return strings.TrimSpace(string(b)), err
}

func start() {
	if u := os.Getenv(URLEnv); u != "" {
		server.url = u
	} else {
		// Root runs the cluster as user postgres; anyone else as
		// themselves (the server binaries must be installed then).
		// The postgres store tests' prefix: they stop a cluster left by a dead process.
		server.dir = "/tmp/berth-pg-test-" + strconv.Itoa(os.Getpid())
		server.url, server.err = run(server.dir, "start", 10*time.Minute)
		if server.err != nil {
			_, _ = run(server.dir, "stop", time.Minute)
			return
		}
	}
	if server.admin, server.err = sql.Open("pgx", server.url); server.err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		server.err = server.admin.PingContext(ctx)
	}
}

// Database returns the URL of a new, empty database for t, dropped at
// its end.
func Database(t testing.TB) string {
	t.Helper()
	server.once.Do(start)
	if server.err != nil {
		t.Fatalf("no PostgreSQL to test against: %v (make deps, i.e. scripts/install-deps.sh, installs PostgreSQL)", server.err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "berth_pgtest_" + hex.EncodeToString(b)
	if _, err := server.admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if _, err := server.admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(server.url)
	if err != nil {
		t.Fatalf("%s is not a URL: %v", URLEnv, err)
	}
	u.Path = "/" + name
	return u.String()
}

// Stop stops the private cluster, if this process started one.
func Stop() {
	if server.admin != nil {
		server.admin.Close()
	}
	if server.dir != "" {
		if _, err := run(server.dir, "stop", time.Minute); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	}
}
