package http

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

// fullStore is a store out of disk space: every call record it is given
// fails as a full SQLite or PostgreSQL does.
type fullStore struct{ registry.Store }

func (s fullStore) BeginCall(ctx context.Context, rec *registry.CallRecord) (*registry.CallRecord, bool, error) {
	return nil, false, fmt.Errorf("%w: database or disk is full (13)", registry.ErrStoreFull)
}

// TestStoreThatNeedsAnOperator: a store that cannot take writes until an
// operator acts (its file deleted under the service) is not "not
// answering; retry shortly": the 503 says an operator is needed, with a
// Retry-After of 30 s, as for a full disk. The refusals of such a store,
// and of a full one, are logged at warn level: /readyz reports the store,
// and a line per refused call at error level paged nobody more than the
// first (2,302 lines in 10 s during a full disk).
func TestStoreThatNeedsAnOperator(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "toolsvc.db")
	st, err := sqlite.Open(t.Context(), db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, f := range []string{db, db + "-wal", db + "-shm"} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name, detail string
		store        registry.Store
	}{
		{"deleted", "the call store needs an operator: ", st},
		{"full", "the call store is out of disk space; ", fullStore{openStore(t)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, logs := infoEnv(t, func(d *Deps, o *registry.Options) { o.Store = c.store })
			r := e.do("POST", "/calls", []byte(`{"toolName":"test__priv","toolCallId":"op-1"}`), jsonCT, true)
			var p Problem
			r.json(t, &p)
			if r.status != http.StatusServiceUnavailable || !strings.HasPrefix(p.Detail, c.detail) || !strings.Contains(p.Detail, "the call did not run") ||
				r.header.Get("Retry-After") != "30" {
				t.Errorf("a call the store refuses: %d %s (Retry-After %q); want 503 %q… saying the call did not run, with Retry-After 30",
					r.status, r.body, r.header.Get("Retry-After"), c.detail)
			}
			line := findLogLine(t, logs, func(m map[string]any) bool { return m["msg"] == "request failed" })
			if line["level"] != "WARN" {
				t.Errorf("the refusal is logged at %v, want WARN: %v", line["level"], line)
			}
		})
	}
}
