package http

import (
	"cmp"
	"net/http"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// index is the answer of GET /: what this service is and its routes, so
// that a first curl shows where to go next.
type index struct {
	Name        string       `json:"name"`
	Description string       `json:"description"`
	Contract    string       `json:"contract"`
	Routes      []indexRoute `json:"routes"`
}

type indexRoute struct {
	Method  string `json:"method"`
	Path    string `json:"path"`
	Summary string `json:"summary"`
}

// newIndex builds the index from the OpenAPI contract, whose routes a test
// holds equal to the router's, sorted by path and method.
func newIndex(contract []byte) index {
	var doc struct {
		Info struct {
			Title   string `yaml:"title"`
			Summary string `yaml:"summary"`
		} `yaml:"info"`
		Paths map[string]map[string]struct {
			Summary string `yaml:"summary"`
		} `yaml:"paths"`
	}
	out := index{Name: "toolsvc", Contract: "/openapi.yaml", Routes: []indexRoute{}}
	if err := yaml.Unmarshal(contract, &doc); err != nil {
		return out // the contract is embedded; its test fails first
	}
	out.Name, out.Description = cmp.Or(doc.Info.Title, out.Name), doc.Info.Summary
	for path, ops := range doc.Paths {
		for method, op := range ops {
			switch method {
			case "get", "post", "put", "patch", "delete":
				out.Routes = append(out.Routes, indexRoute{Method: strings.ToUpper(method), Path: path, Summary: op.Summary})
			}
		}
	}
	slices.SortFunc(out.Routes, func(a, b indexRoute) int {
		return cmp.Or(strings.Compare(a.Path, b.Path), strings.Compare(a.Method, b.Method))
	})
	return out
}

func (s *Server) handleIndex() http.HandlerFunc {
	idx := newIndex(s.deps.OpenAPI)
	return func(w http.ResponseWriter, r *http.Request) {
		_ = encode(w, http.StatusOK, idx)
	}
}
