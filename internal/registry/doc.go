// Package registry is the core of toolsvc: tool definitions and names, the
// registry and catalogs, calls and results, error codes, and the executor
// pipeline that turns a call into a result. It imports no other internal
// package; tools, policy, store and the HTTP adapter import it.
package registry
