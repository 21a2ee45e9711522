package wire

// Watch event types (WatchEvent.Type).
const (
	WatchCreate   = "create"
	WatchWrite    = "write" // a file opened for writing was closed
	WatchRemove   = "remove"
	WatchRename   = "rename"   // Path is the new name, OldPath the old
	WatchOverflow = "overflow" // events were lost (the agent's queue or the kernel's)
)

// MaxWatchEventJSON caps one WatchEvent frame (two paths and a little).
const MaxWatchEventJSON = 2*MaxPathBytes + 256

// WatchEvent is the payload of each result frame of a watch.
type WatchEvent struct {
	Type    string `json:"type"`
	Path    string `json:"path,omitempty"`
	OldPath string `json:"old_path,omitempty"`
	IsDir   bool   `json:"is_dir,omitempty"`
}
