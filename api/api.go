// Package api embeds toolsvc's OpenAPI contract.
package api

import _ "embed"

//go:embed openapi.yaml
var spec []byte

// OpenAPI returns the OpenAPI 3.1 document of the HTTP API.
func OpenAPI() []byte { return spec }
