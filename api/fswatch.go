package api

// Watch event types (WatchEvent.Type) of GET /v1/sandboxes/{id}/files/watch.
const (
	WatchReady    = "ready"    // the first event: the directory is watched
	WatchCreate   = "create"   // a file, directory or link appeared (also moved in)
	WatchWrite    = "write"    // a file opened for writing was closed
	WatchRemove   = "remove"   // removed (also moved out)
	WatchRename   = "rename"   // old_path is now path
	WatchOverflow = "overflow" // events were lost: rescan what you track
	WatchEnd      = "end"      // the watched directory went away; the stream ends
	WatchError    = "error"    // the watch failed (error says why); the stream ends
)

// WatchEvent is one line of the NDJSON stream (or one WebSocket text
// message) of a files watch.
type WatchEvent struct {
	Type    string `json:"type"`
	Path    string `json:"path,omitempty"`
	OldPath string `json:"old_path,omitempty"`
	IsDir   bool   `json:"is_dir,omitempty"`
	Error   *Error `json:"error,omitempty"`
}
