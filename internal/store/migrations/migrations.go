// Package migrations holds berth's SQL schema as numbered, embedded migration
// files shared by every SQL backend of the store (SQLite now, PostgreSQL
// later).
//
// A migration is a file named NNNN_name.sql; its version is NNNN. Versions
// start at 1 and have no gaps. A file is never edited once released: a schema
// change is a new file. The SQL is kept to the portable subset (TEXT, BIGINT,
// BOOLEAN; timestamps as BIGINT unix microseconds in UTC; JSON as TEXT) and
// may use the dialect macro {{identity}}, which each backend expands (see
// sqlstore.Dialect). sqlstore.Migrate applies the files.
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"sync"
)

//go:embed *.sql
var files embed.FS

// Migration is one schema step.
type Migration struct {
	Version int
	Name    string // the file name's part after the version, e.g. "init"
	SQL     string // as written: dialect macros are not yet expanded
}

var fileRE = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.sql$`)

var load = sync.OnceValues(func() ([]Migration, error) { return parse(files) })

// All returns every migration in version order.
func All() ([]Migration, error) {
	ms, err := load()
	return slices.Clone(ms), err
}

// Latest returns the schema version this binary knows, or 0 if the embedded
// set is invalid (All then reports why).
func Latest() int {
	ms, err := load()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

func parse(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, n := range names {
		m := fileRE.FindStringSubmatch(n)
		if m == nil {
			return nil, fmt.Errorf("migrations: bad file name %q: want NNNN_name.sql", n)
		}
		v, _ := strconv.Atoi(m[1])
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: m[2], SQL: string(b)})
	}
	slices.SortFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrations: version %d (%s) out of sequence: want %d", m.Version, m.Name, i+1)
		}
	}
	return ms, nil
}
