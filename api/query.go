package api

import "time"

// Query parameters of the routes that take them: the route table
// declares each route's struct (internal/server, Route.Query), from
// which api/openapi.json documents the parameters. A field's tag
// `query:"name"` names it, `query:"name,required"` makes it required;
// its doc comment is its description.

// Page is the paging of a list: the body stays the bare array, with the
// next page's cursor in the Berth-Next-Cursor response header.
type Page struct {
	// Limit is the most items to return in this page (1 or more; default
	// and cap 1000: a larger limit is served as 1000). A page may hold
	// fewer, also before the end; the end is the page without a
	// Berth-Next-Cursor header.
	Limit int `query:"limit" oa:"minimum=1,default=1000"`
	// Cursor is where the page starts: the Berth-Next-Cursor header of
	// the page before, of the same list. Opaque; one that is not such a
	// value is 400 invalid_argument. Lists are in a stable order
	// (creation time then id; templates by name; events by id), so
	// paging while others create or delete never returns an item twice
	// and never skips one that existed throughout.
	Cursor string `query:"cursor" oa:"maxLength=512"`
}

// ListQuery is the query of a list that can include what was deleted.
type ListQuery struct {
	// All includes the tombstones of deleted ones.
	All bool `query:"all"`
	Page
}

// DeleteSandboxQuery is the query of DELETE /v1/sandboxes/{id}.
type DeleteSandboxQuery struct {
	// Force is accepted for older clients and changes nothing: every
	// delete removes the sandbox whatever its state.
	Force bool `query:"force"`
}

// StopQuery is the query of POST /v1/sandboxes/{id}/stop.
type StopQuery struct {
	// Timeout is the grace between the stop signal and the kill: a
	// duration (30s) or whole seconds (30), 0 to 10m; 0 kills at once.
	// 400 invalid_argument otherwise.
	Timeout string `query:"timeout"`
}

// FileQuery names the file of a file route.
type FileQuery struct {
	// Path is the path inside the sandbox.
	Path string `query:"path,required"`
}

// ReadFileQuery is the query of GET /v1/sandboxes/{id}/files.
type ReadFileQuery struct {
	FileQuery
	// Format is "tar" for a tar stream of the file or directory.
	Format string `query:"format"`
}

// WriteFileQuery is the query of PUT /v1/sandboxes/{id}/files.
type WriteFileQuery struct {
	FileQuery
	// Format is "tar" to extract the body (a tar) into the directory
	// path.
	Format string `query:"format"`
	// Mode is the octal permission bits of the file (raw writes).
	Mode string `query:"mode"`
	// User owns what the write creates: a user of the sandbox, uid[:gid]
	// or a name of its /etc/passwd. Default: the sandbox's user (root if
	// it has none).
	User string `query:"user"`
	// PreserveOwner makes each entry keep the archive's uid and gid, as
	// the sandbox sees ids (archive mode): with format=tar, not with
	// user.
	PreserveOwner bool `query:"preserve_owner"`
}

// RemoveFileQuery is the query of DELETE /v1/sandboxes/{id}/files.
type RemoveFileQuery struct {
	FileQuery
	// Recursive removes a directory with its contents.
	Recursive bool `query:"recursive"`
}

// MkdirQuery is the query of POST /v1/sandboxes/{id}/files/mkdir.
type MkdirQuery struct {
	FileQuery
	// Parents creates missing parents; an existing directory is not an
	// error.
	Parents bool `query:"parents"`
}

// MoveFileQuery is the query of POST /v1/sandboxes/{id}/files/move.
type MoveFileQuery struct {
	FileQuery
	// To is the new path (absolute).
	To string `query:"to,required"`
	// NoReplace refuses (409) an existing destination instead of
	// replacing it.
	NoReplace bool `query:"no_replace"`
}

// WatchQuery is the query of GET /v1/sandboxes/{id}/files/watch.
type WatchQuery struct {
	FileQuery
	// Recursive watches the whole subtree (new directories included).
	Recursive bool `query:"recursive"`
}

// SandboxEventsQuery is the query of GET /v1/sandboxes/{id}/events.
type SandboxEventsQuery struct {
	// After returns only events whose id is greater than this (an event
	// id), or, as "latest", only events written from now on.
	After string `query:"after"`
	// Type returns only events of this type (repeatable).
	Type []string `query:"type"`
	Page
}

// EventsQuery is the query of GET /v1/events.
type EventsQuery struct {
	// Sandbox returns only events of this sandbox, by id or name
	// (repeatable).
	Sandbox []string `query:"sandbox"`
	SandboxEventsQuery
}

// FlowsQuery is the query of GET /v1/sandboxes/{id}/flows.
type FlowsQuery struct {
	// After returns only flows after this sequence number.
	After int64 `query:"after"`
}

// AuditQuery is the query of GET /v1/audit.
type AuditQuery struct {
	// Since returns entries that began at or after this time (RFC 3339).
	Since time.Time `query:"since"`
	// Until returns entries that began before this time (RFC 3339).
	Until time.Time `query:"until"`
	// Actor returns only this actor (local, key:<id>, lease:<sandbox>,
	// system:<component>).
	Actor string `query:"actor"`
	// Action returns only this action (a route pattern, or
	// <component>.<action>).
	Action string `query:"action"`
	// Target returns only this target (a sandbox id, a volume or
	// template name).
	Target string `query:"target"`
	Page
}

// ProcessLogsQuery is the query of GET .../processes/{pid}/logs.
type ProcessLogsQuery struct {
	// Follow keeps the stream open with the live output until the
	// process exits.
	Follow bool `query:"follow"`
}

// ProcessStdinQuery is the query of POST .../processes/{pid}/stdin.
type ProcessStdinQuery struct {
	// Close closes stdin after the body.
	Close bool `query:"close"`
}

// DockerfileQuery is the query of POST /v1/templates/{name}/dockerfile
// (its body is the build context, a tar).
type DockerfileQuery struct {
	// Dockerfile is the Dockerfile's name in the context
	// (.berth-dockerfile: one sent from outside it, never copied).
	Dockerfile string `query:"dockerfile"`
	// Target is the stage to build (default: the last).
	Target string `query:"target"`
	// BuildArgs are the build arguments, a JSON object of strings.
	BuildArgs string `query:"buildargs"`
	// Network is the RUN steps' network.
	Network string `query:"network"`
	// Allow are the egress rules of the RUN steps; repeatable.
	Allow []string `query:"allow"`
	// TimeoutSeconds is the time limit of each RUN (default an hour).
	TimeoutSeconds float64 `query:"timeout_seconds"`
}
