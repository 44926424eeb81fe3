package ui

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// /ui/assets/ serves the console's files and lists none: the directory
// is not found, as a name that is not there is.
func TestAssetsAreNotListed(t *testing.T) {
	c, err := New(Options{Executor: noExecutor{}, Authenticate: func(string) (*registry.Caller, bool) { return nil, false }})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	c.Routes(r)
	get := func(path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		return w
	}
	for _, path := range []string{"/ui/assets/", "/ui/assets/nope.css"} {
		if w := get(path); w.Code != http.StatusNotFound || strings.Contains(w.Body.String(), "console.css") {
			t.Errorf("GET %s: %d %.200s", path, w.Code, w.Body)
		}
	}
	if w := get("/ui/assets/console.css"); w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/css") {
		t.Errorf("GET /ui/assets/console.css: %d %s", w.Code, w.Header().Get("Content-Type"))
	}
}
