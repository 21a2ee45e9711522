package api

import _ "embed"

// OpenAPI is the OpenAPI 3 document of the API, served by the daemon at
// GET /v1/openapi.json. It describes the types of this package; a test keeps
// the two in step.
//
//go:embed openapi.json
var OpenAPI []byte
