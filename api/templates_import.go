package api

// ImportEvent is one line of the NDJSON stream POST /v1/templates/import
// and PUT /v1/templates/{name}/archive answer when the request asks for
// it with `Accept: application/x-ndjson` (otherwise they answer the
// Template alone): progress lines, then the template or an error.
type ImportEvent struct {
	Progress *ImportProgress `json:"progress,omitempty"`
	Template *Template       `json:"template,omitempty"`
	Error    *Error          `json:"error,omitempty"`
}

// ImportProgress is how far the import of one layer is: Bytes of its blob
// (as served: compressed for a layout or a registry) read, of Size when
// the manifest says (0: unknown). Done is the layer's last line; Cached
// means it was in the store already and nothing was read.
type ImportProgress struct {
	Layer  int    `json:"layer"`  // 1-based
	Layers int    `json:"layers"` // of the image
	Digest string `json:"digest"` // the layer's diffID
	Bytes  int64  `json:"bytes"`
	Size   int64  `json:"size,omitempty"`
	Done   bool   `json:"done,omitempty"`
	Cached bool   `json:"cached,omitempty"`
}
