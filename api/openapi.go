package api

import _ "embed"

// OpenAPI is the OpenAPI 3 document of the API, served by the daemon at
// GET /v1/openapi.json. It is generated, not written: from the server's
// route table (each route's request and answer types), the types of this
// package with their doc comments, and the prose of openapi-overlay.yaml
// (package internal/openapi). Edit those and run go generate ./api;
// make lint fails when the two differ.
//
//go:generate go run ../internal/server/openapigen -root ..
//go:embed openapi.json
var OpenAPI []byte
