package sqlstore

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

// A cursor is the sort key of the last item of a page, tagged with the
// list it belongs to: base64url of "list|at|id". It is opaque to callers
// but not secret: a doctored one can only name another position in the
// same list, which the owner filter still applies to. Decoding is strict
// (one encoding per position: decode then encode gives the input back), so
// anything else is ErrInvalid, never a query error.

// maxCursor bounds a cursor's length (ids and names are far shorter).
const maxCursor = 512

// order is the stable sort of a list and the columns of its key: at (a
// BIGINT: creation time, or the id of an id-ordered list) then id (a unique
// TEXT); either may be empty, not both.
type order struct {
	list   string
	at, id string
	desc   bool // descending (at, id)
}

var (
	bySandboxCreated  = order{list: "sandboxes", at: "created_at", id: "id"}
	bySandboxNewest   = order{list: "sandboxes-newest", at: "created_at", id: "id", desc: true}
	byVolumeCreated   = order{list: "volumes", at: "created_at", id: "id"}
	bySnapshotCreated = order{list: "snapshots", at: "created_at", id: "id"}
	byAPIKeyCreated   = order{list: "api_keys", at: "created_at", id: "id"}
	byTemplateName    = order{list: "templates", id: "name"}
	byEventID         = order{list: "events", at: "id"}
	byAllEventsID     = order{list: "all-events", at: "id"}
	bySecretName      = order{list: "secrets", id: "name"}
)

// EncodeCursor is the cursor of the position (at, id) in list.
func EncodeCursor(list string, at int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(list + "|" + strconv.FormatInt(at, 10) + "|" + id))
}

// DecodeCursor returns the position a cursor of list names, or ErrInvalid.
func DecodeCursor(list, c string) (at int64, id string, err error) {
	bad := errdefs.Invalid("cursor is not one of this list's: start again without it")
	if c == "" || len(c) > maxCursor {
		return 0, "", bad
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", bad
	}
	tag, rest, ok := strings.Cut(string(raw), "|")
	if !ok || tag != list {
		return 0, "", bad
	}
	num, id, ok := strings.Cut(rest, "|")
	if !ok {
		return 0, "", bad
	}
	at, err = strconv.ParseInt(num, 10, 64)
	// No id or name holds a control character, and PostgreSQL refuses a
	// NUL or invalid UTF-8 in a text parameter.
	if err != nil || !utf8.ValidString(id) || strings.ContainsFunc(id, unicode.IsControl) || EncodeCursor(list, at, id) != c {
		return 0, "", bad
	}
	return at, id, nil
}

// pageQuery is a list query: base selects from one table, where and args
// filter it.
type pageQuery struct {
	base  string
	where []string
	args  []any
}

func (q *pageQuery) and(cond string, args ...any) {
	q.where = append(q.where, cond)
	q.args = append(q.args, args...)
}

// listPage runs q in order o from p's cursor, at most p.Limit rows (all for
// 0), and returns them with the next page's cursor. It reads one row more
// than asked to know whether there is a next page, so the last page has no
// cursor.
func listPage[T any](ctx context.Context, s *sqlStore, q pageQuery, o order, p store.Page,
	scan func(scanner) (T, error), key func(T) (int64, string)) ([]T, string, error) {
	if p.Limit < 0 {
		return nil, "", errdefs.Invalid("page limit %d is negative", p.Limit)
	}
	if p.Cursor != "" {
		at, id, err := DecodeCursor(o.list, p.Cursor)
		if err != nil {
			return nil, "", err
		}
		cmp := " > "
		if o.desc {
			cmp = " < "
		}
		switch {
		case o.at != "" && o.id != "":
			q.and("("+o.at+cmp+"? OR ("+o.at+" = ? AND "+o.id+cmp+"?))", at, at, id)
		case o.at != "":
			q.and(o.at+cmp+"?", at)
		default:
			q.and(o.id+cmp+"?", id)
		}
	}
	sql := q.base
	if len(q.where) > 0 {
		sql += " WHERE " + strings.Join(q.where, " AND ")
	}
	dir := ""
	if o.desc {
		dir = " DESC"
	}
	switch {
	case o.at != "" && o.id != "":
		sql += " ORDER BY " + o.at + dir + ", " + o.id + dir
	case o.at != "":
		sql += " ORDER BY " + o.at + dir
	default:
		sql += " ORDER BY " + o.id + dir
	}
	args := q.args
	if p.Limit > 0 {
		sql += " LIMIT ?"
		args = append(args, p.Limit+1)
	}
	rows, err := s.query(ctx, sql, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list %s: %w", o.list, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list %s: %w", o.list, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list %s: %w", o.list, err)
	}
	if p.Limit == 0 || len(out) <= p.Limit {
		return out, "", nil
	}
	out = out[:p.Limit]
	at, id := key(out[len(out)-1])
	return out, EncodeCursor(o.list, at, id), nil
}

// owner adds o's filter on the tenant column col.
func (q *pageQuery) owner(o store.Owner, col string) {
	if t, ok := o.Tenant(); ok {
		q.and(col+" = ?", t)
	}
}
