package http

import (
	"fmt"
	"net/http"
	"strings"
)

// queryOnce refuses a request that gives a query parameter more than
// once: handlers read the first value (url.Values.Get), so
// ?tier=read_only&tier=bogus would be read as read_only and
// ?names=a&names=b as a alone, without a word. names, a list, may be
// repeated: its values are read as one comma-separated list.
func (s *Server) queryOnce(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery == "" {
			next.ServeHTTP(w, r)
			return
		}
		q := r.URL.Query()
		for name, values := range q {
			if len(values) < 2 {
				continue
			}
			if name == "names" {
				q.Set(name, strings.Join(values, ","))
				r.URL.RawQuery = q.Encode()
				continue
			}
			s.writeProblem(w, r, problem(kindInvalidParameter, fmt.Sprintf("query parameter %q is given %d times; give it once", clipTo(name, maxEchoBytes), len(values))))
			return
		}
		next.ServeHTTP(w, r)
	})
}
