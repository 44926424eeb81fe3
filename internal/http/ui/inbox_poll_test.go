package ui

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

// countingStore is the embedded store, counting the requests its lists
// return.
type countingStore struct {
	*sqlite.Store
	listed atomic.Int64
}

func (s *countingStore) ListApprovals(ctx context.Context, f registry.ApprovalFilter) ([]*registry.Approval, error) {
	list, err := s.Store.ListApprovals(ctx, f)
	s.listed.Add(int64(len(list)))
	return list, err
}

// TestInboxPollReadsOnlyTheVersion: the inbox's script asks every 2
// seconds whether anything changed; the answer, 204 while nothing did,
// comes from the version alone, without reading the lists (160 requests,
// with their arguments). Every change the lists show still changes the
// version: a request arriving, one decided, one expiring, one deleted.
func TestInboxPollReadsOnlyTheVersion(t *testing.T) {
	var mu sync.Mutex
	now := time.Now().UTC().Truncate(time.Microsecond)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st := &countingStore{Store: db}
	c, err := New(Options{Executor: storeExecutor{st: st}, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	c.Routes(r)
	srv := httptest.NewServer(r)
	defer srv.Close()

	file := func(id string, ttl time.Duration) {
		t.Helper()
		exp := clock().Add(ttl)
		rec := &registry.CallRecord{CallerID: "agent", ToolCallID: "c-" + id, ToolName: "shell__exec", ArgumentsDigest: "d-" + id,
			Arguments: []byte(`{"command":"make"}`), State: registry.CallPendingApproval, ApprovalID: id, ExpiresAt: exp,
			Result: &registry.Result{ToolCallID: "c-" + id, ToolName: "shell__exec", Status: registry.StatusPendingApproval,
				Approval: &registry.ApprovalTicket{ID: id, ExpiresAt: exp, ArgumentsDigest: "d-" + id}}}
		if _, _, err := st.BeginCall(t.Context(), rec); err != nil {
			t.Fatal(err)
		}
		if err := st.CreateApproval(t.Context(), &registry.Approval{ID: id, CallerID: "agent", ToolCallID: rec.ToolCallID, ToolName: "shell__exec",
			Tier: registry.Privileged, ArgumentsDigest: rec.ArgumentsDigest, Arguments: rec.Arguments, ExpiresAt: exp,
			Filed: &registry.Filing{Caller: registry.Caller{ID: "agent"}, Claims: map[string]any{"groups": strings.Repeat("g", 10000)}}}); err != nil {
			t.Fatal(err)
		}
		advance(time.Millisecond)
	}
	get := func(path string) (int, string, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("X-Inbox-Version"), string(b)
	}

	file("apr_old", time.Hour)
	for i := range 30 {
		file(fmt.Sprintf("apr_%02d", i), 2*time.Hour)
	}
	code, _, page := get("/ui")
	m := regexp.MustCompile(`data-version="([0-9a-f]+)"`).FindStringSubmatch(page)
	if code != http.StatusOK || m == nil {
		t.Fatalf("GET /ui: %d, no version in\n%.500s", code, page)
	}
	v := m[1]
	st.listed.Store(0)
	if code, got, _ := get("/ui/inbox?v=" + v); code != http.StatusNoContent || got != v {
		t.Fatalf("a poll with the page's version: %d, version %q; want 204, %q", code, got, v)
	}
	if n := st.listed.Load(); n > 2 {
		t.Errorf("a poll that changed nothing read %d requests; want only the newest and the oldest", n)
	}

	// Each change is answered with the lists, under a new version, which
	// the next poll is answered 204 with.
	for _, change := range []struct {
		name string
		do   func()
		want string
	}{
		{"a request arrives", func() { file("apr_new", 2*time.Hour) }, `id="req-apr_new"`},
		{"a request is decided", func() {
			if _, won, err := st.DecideApproval(t.Context(), "apr_05", registry.VerdictDeny, "oncall", "not now", clock()); err != nil || !won {
				t.Fatalf("deciding: won %v, %v", won, err)
			}
		}, "not now"},
		{"a request expires", func() { advance(time.Hour) }, `id="pending-count">30<`},
		{"retention deletes a request", func() {
			if n, err := st.DeleteExpired(t.Context(), clock().Add(time.Second)); err != nil || n == 0 {
				t.Fatalf("DeleteExpired: %d, %v", n, err)
			}
		}, ""},
	} {
		change.do()
		code, got, body := get("/ui/inbox?v=" + v)
		if code != http.StatusOK || got == v || got == "" || !strings.Contains(body, change.want) {
			t.Fatalf("%s: the poll answered %d, version %q (was %q); want 200 with a new version and %q in\n%.300s", change.name, code, got, v, change.want, body)
		}
		v = got
		if code, got, _ := get("/ui/inbox?v=" + v); code != http.StatusNoContent || got != v {
			t.Fatalf("%s: the next poll answered %d, version %q; want 204, %q", change.name, code, got, v)
		}
	}
	if code, _, body := get("/ui/inbox"); code != http.StatusOK || strings.Contains(body, "apr_old") {
		t.Errorf("the inbox still shows the deleted request apr_old: %d", code)
	}
}
