package http

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/toolsvc/toolsvc/internal/http/ui"
	"github.com/toolsvc/toolsvc/internal/registry"
)

func (s *Server) handleListTools(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := registry.Filter{Tag: q.Get("tag"), Query: q.Get("q")}
	if err := registry.CheckSearch(f.Query); err != nil {
		return problem(kindInvalidParameter, err.Error())
	}
	if t := q.Get("tier"); t != "" {
		tier, err := registry.ParseTier(t)
		if err != nil {
			return problem(kindInvalidParameter, "tier: "+err.Error())
		}
		f.Tier = tier
	}
	if names := q.Get("names"); names != "" {
		f.Names = strings.Split(names, ",")
	}
	strict, err := strictParam(q)
	if err != nil {
		return err
	}
	format, err := s.formats.catalog(q.Get("format"), strict)
	if err != nil {
		return err
	}
	tools := s.deps.Executor.Registry().List(CallerFrom(r.Context()), f)
	catalog := map[string]any{"tools": format.list(tools)}
	if strict {
		catalog["notStrict"] = notStrict(tools)
	}
	body, err := marshal(catalog)
	if err != nil {
		return err
	}
	return writeCacheable(w, r, body)
}

func (s *Server) handleGetTool(w http.ResponseWriter, r *http.Request) error {
	name := ui.PathParam(r, "name")
	t, ok := s.deps.Executor.Registry().Lookup(name)
	if !ok || !CallerFrom(r.Context()).Sees(&t.Definition) {
		return problem(kindNotFound, "no tool named "+name+" in this caller's catalog")
	}
	q := r.URL.Query()
	strict, err := strictParam(q)
	if err != nil {
		return err
	}
	format, err := s.formats.catalog(q.Get("format"), strict)
	if err != nil {
		return err
	}
	body, err := marshal(format.one(t))
	if err != nil {
		return err
	}
	return writeCacheable(w, r, body)
}

// writeCacheable sends body with a strong ETag, or 304 when the client
// already has it.
func writeCacheable(w http.ResponseWriter, r *http.Request, body []byte) error {
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:16]) + `"`
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "no-cache")
	if match := r.Header.Get("If-None-Match"); match != "" && etagMatches(match, etag) {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	w.Header().Set("Content-Type", "application/json")
	_, err := w.Write(body)
	return err
}

func etagMatches(header, etag string) bool {
	for _, m := range strings.Split(header, ",") {
		m = strings.TrimPrefix(strings.TrimSpace(m), "W/")
		if m == etag || m == "*" {
			return true
		}
	}
	return false
}

func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	return buf.Bytes(), err
}
