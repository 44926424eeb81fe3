package http

import (
	"bytes"
	"net/url"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// A search's cost grows with its words times the catalog, so a query of
// more words than a search takes is refused, saying how many it may have.
func TestCatalogSearchWordLimit(t *testing.T) {
	e := newEnv(t)
	words := func(n int) string { return url.QueryEscape(strings.TrimSpace(strings.Repeat("th ", n))) }
	if r := e.do("GET", "/tools?q="+words(registry.MaxSearchTerms), nil, nil, true); r.status != 200 {
		t.Errorf("q of %d words: %d %s", registry.MaxSearchTerms, r.status, r.body)
	}
	r := e.do("GET", "/tools?q="+words(100000), nil, nil, true)
	if r.status != 400 || !bytes.Contains(r.body, []byte("q has 100000 words")) || !bytes.Contains(r.body, []byte("invalid_parameter")) {
		t.Errorf("q of 100000 words: %d %.300s", r.status, r.body)
	}
}
