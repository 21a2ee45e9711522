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
// the manifest says (0: unknown); for a push, of its compressed blob
// uploaded. Done is the layer's last line; Cached means it was in the
// store already (for a push: in the registry) and nothing was read.
type ImportProgress struct {
	Layer  int    `json:"layer"`  // 1-based
	Layers int    `json:"layers"` // of the image
	Digest string `json:"digest"` // the layer's diffID
	Bytes  int64  `json:"bytes"`
	Size   int64  `json:"size,omitempty"`
	Done   bool   `json:"done,omitempty"`
	Cached bool   `json:"cached,omitempty"`
	// TotalBytes of TotalSize over all the image's layers (a cached
	// layer counts as read); absent when a layer's size is unknown (a
	// docker-save archive).
	TotalBytes int64 `json:"total_bytes,omitempty"`
	TotalSize  int64 `json:"total_size,omitempty"`
}

// PushTemplateRequest is the body of POST /v1/templates/{name}/push: the
// registry reference to write the template to.
type PushTemplateRequest struct {
	Ref      string `json:"ref"`
	Insecure bool   `json:"insecure,omitempty"` // allow a plain-HTTP registry
	// RegistryAuth is a registry account for this push alone, never
	// stored or shown; without it the host's pushes use the daemon's
	// credentials and a tenant's go anonymous.
	RegistryAuth *RegistryAuth `json:"registry_auth,omitempty"`
}

// PushResult is what a push wrote: the reference, the manifest's digest
// and the pushed layers' diffIDs (bottom first).
type PushResult struct {
	Ref    string   `json:"ref"`
	Digest string   `json:"digest"`
	Layers []string `json:"layers"`
}

// PushEvent is one line of the NDJSON stream POST
// /v1/templates/{name}/push answers with `Accept: application/x-ndjson`
// (otherwise it answers the PushResult alone): progress lines (Bytes of
// the layer's compressed blob uploaded of Size; Cached: the registry had
// it), then the result or an error.
type PushEvent struct {
	Progress *ImportProgress `json:"progress,omitempty"`
	Result   *PushResult     `json:"result,omitempty"`
	Error    *Error          `json:"error,omitempty"`
}
