package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/postgres"
	"github.com/toolsvc/toolsvc/internal/store/storetest"
)

// partition is a TCP proxy in front of the test database that fails as a
// network partition does: Stop cuts (closes) or freezes (keeps open and
// never forwards again) every connection it forwards, and from then
// accepts new connections and never answers them; Heal forwards new
// connections again, while the frozen and swallowed ones stay silent, as
// connections started into a partition do.
type partition struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	links map[*link]struct{}
	held  []net.Conn
	wg    sync.WaitGroup
}

// link is one forwarded connection.
type link struct {
	client, server net.Conn
	frozen         atomic.Bool
}

// newPartition starts a proxy to the database of dbURL and returns it
// with the URL that goes through it.
func newPartition(t *testing.T, dbURL string) (*partition, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil || u.Host == "" {
		t.Skipf("TOOLSVC_TEST_POSTGRES_URL %q is not a postgres://host/… URL the proxy can stand in front of", dbURL)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &partition{ln: ln, target: u.Host, links: make(map[*link]struct{})}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	u.Host = ln.Addr().String()
	return p, u.String()
}

// Stop starts the partition: forwarded connections are closed (cut) or
// frozen.
func (p *partition) Stop(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for l := range p.links {
		if cut {
			l.client.Close()
			l.server.Close()
		} else {
			l.frozen.Store(true)
		}
	}
}

// Heal forwards new connections again.
func (p *partition) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

func (p *partition) close() {
	p.ln.Close()
	p.mu.Lock()
	for l := range p.links {
		l.client.Close()
		l.server.Close()
	}
	for _, c := range p.held {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *partition) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		if down {
			p.held = append(p.held, c)
		}
		p.mu.Unlock()
		if down {
			p.wg.Go(func() { _, _ = io.Copy(io.Discard, c) }) // never answered
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		l := &link{client: c, server: up}
		p.mu.Lock()
		p.links[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(l, up, c) })
		p.wg.Go(func() { p.pipe(l, c, up) })
	}
}

// pipe copies src to dst until either fails, dropping what a frozen
// link reads.
func (p *partition) pipe(l *link, dst, src net.Conn) {
	defer func() {
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
		src.Close()
		dst.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !l.frozen.Load() {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// failPings makes the store try new connections while the database does
// not answer: each Ping gives up after a moment, and the pool goes on
// making the connection it started for it.
func failPings(t *testing.T, s *postgres.Store, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			if err := s.Ping(ctx); err == nil {
				t.Error("a Ping succeeded while the database did not answer: the partition is not in place")
			}
		})
	}
	wg.Wait()
}

// TestPoolWorksOnceTheDatabaseAnswersAgain: connections the pool started
// while the database accepted them and never answered gave up only after
// pgx's own 2 minutes, however short the callers' deadlines, and held
// every place of the pool meanwhile: the service answered 503 for up to
// 2 minutes after the database was back. With the URL setting no
// connect_timeout, their making is now bounded by Options.ConnectTimeout,
// and a Ping within the store's deadline (5 s) succeeds once it answers.
func TestPoolWorksOnceTheDatabaseAnswersAgain(t *testing.T) {
	dbURL := testURL(t)
	p, through := newPartition(t, dbURL)
	s := open(t, postgres.Options{URL: through, Schema: storetest.PostgresSchema(t, dbURL),
		MaxConns: 2, ConnectTimeout: time.Second})
	if err := s.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	p.Stop(true)
	failPings(t, s, 4)
	p.Heal()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping once the database answers again, within the store's deadline: %v; want success (the pool's places are held by connections started during the outage)", err)
	}
}

// TestListenerReconnectsOnceTheDatabaseAnswersAgain: the notification
// listener's reconnection had no bound: started while the database
// accepted connections and never answered, it hung for good, and this
// replica never again heard of other replicas' changes (its waiters fell
// back to polling). Nor did a listener whose connection the partition
// froze ever notice. Both now reconnect once the database answers.
func TestListenerReconnectsOnceTheDatabaseAnswersAgain(t *testing.T) {
	for _, c := range []struct {
		name string
		cut  bool
	}{{"cut", true}, {"frozen", false}} {
		t.Run(c.name, func(t *testing.T) {
			dbURL := testURL(t)
			schema := storetest.PostgresSchema(t, dbURL)
			p, through := newPartition(t, dbURL)
			// A short lease: the listener checks a quiet connection every
			// third of one.
			a := open(t, postgres.Options{URL: through, Schema: schema, ConnectTimeout: time.Second, Lease: 3 * time.Second})
			b := open(t, postgres.Options{URL: dbURL, Schema: schema})
			p.Stop(c.cut)
			failPings(t, a, 2)
			// Long enough for the listener to notice a frozen connection
			// and to start reconnecting into the partition.
			time.Sleep(4 * time.Second)
			p.Heal()
			heard := a.Notifications()
			for i := 0; a.Notifications() == heard; i++ {
				if i == 150 {
					t.Fatalf("replica A heard none of %d changes replica B made after the database answered again: its listener did not reconnect", i)
				}
				rec := &registry.CallRecord{CallerID: "c", ToolCallID: fmt.Sprintf("b-%d", i), ToolName: "fs__write",
					ArgumentsDigest: "d", State: registry.CallRunning}
				if _, _, err := b.BeginCall(t.Context(), rec); err != nil {
					t.Fatal(err)
				}
				if _, stored, err := b.FinishCall(t.Context(), rec.CallerID, rec.ToolCallID, okResult(rec), nil); err != nil || !stored {
					t.Fatal(stored, err)
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	}
}

func okResult(rec *registry.CallRecord) *registry.Result {
	return &registry.Result{ToolCallID: rec.ToolCallID, ToolName: rec.ToolName, Status: registry.StatusOK,
		Output: json.RawMessage(`"done"`)}
}

// TestOwnCallsOutliveALapsedLease: after an outage of the database longer
// than the lease, the records of the calls a replica was still running
// read as lapsed, and the replica's own waiters, retries and sweep ended
// them as E_INTERRUPTED ("the service stopped while the tool was
// running", which it had not); the call's own answer then said
// E_INTERRUPTED too. A replica now never ends a call it runs (or holds the
// result of); it still ends the lapsed calls of replicas that are gone,
// and those it no longer runs.
func TestOwnCallsOutliveALapsedLease(t *testing.T) {
	dbURL := testURL(t)
	schema := storetest.PostgresSchema(t, dbURL)
	// Hour-long leases: no renewal comes during the test.
	a := open(t, postgres.Options{URL: dbURL, Schema: schema, Lease: time.Hour})
	b := open(t, postgres.Options{URL: dbURL, Schema: schema, Lease: time.Hour})
	ctx := t.Context()
	rec := func(id string) *registry.CallRecord {
		return &registry.CallRecord{CallerID: "c", ToolCallID: id, ToolName: "http__get", ArgumentsDigest: "d", State: registry.CallRunning}
	}
	for _, x := range []struct {
		s  *postgres.Store
		id string
	}{{a, "runs-here"}, {a, "let-go"}, {b, "gone-replica"}} {
		if _, created, err := x.s.BeginCall(ctx, rec(x.id)); err != nil || !created {
			t.Fatal(x.id, created, err)
		}
	}
	a.ReleaseCall("c", "let-go") // its result was lost: nothing renews it
	b.Close()                    // replica B is gone
	// The outage: every lease lapsed, as no renewal could be written.
	conn := schemaConn(t, dbURL, schema)
	if _, err := conn.Exec(ctx, `UPDATE calls SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}

	if r, err := a.GetCall(ctx, "c", "runs-here"); err != nil || r.State != registry.CallRunning {
		t.Fatalf("the replica read a call it still runs, past its lease: %v %+v; want running", err, r)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	r, err := a.WaitCall(wctx, "c", "runs-here")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || r == nil || r.State != registry.CallRunning {
		t.Fatalf("a waiter on the replica that runs the call: %v %+v; want it still running at the waiter's deadline", err, r)
	}
	if _, err := a.InterruptRunning(ctx); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]registry.CallState{"runs-here": registry.CallRunning, "let-go": registry.CallDone, "gone-replica": registry.CallDone} {
		r, err := a.GetCall(ctx, "c", id)
		if err != nil {
			t.Fatal(id, err)
		}
		if r.State != want || (want == registry.CallDone && (r.Result == nil || r.Result.Error == nil || r.Result.Error.Code != registry.CodeInterrupted)) {
			t.Errorf("%s after the replica's sweep: %s %+v; want %s (E_INTERRUPTED when done)", id, r.State, r.Result, want)
		}
	}
	if _, stored, err := a.FinishCall(ctx, "c", "runs-here", okResult(rec("runs-here")), nil); err != nil || !stored {
		t.Fatalf("the result of the call the replica ran: stored %v, %v; want it recorded", stored, err)
	}
}

// TestLeasesRenewedOnceTheDatabaseAnswersAgain: a replica renewed its
// leases only every third of a lease, so after an outage longer than a
// lease other replicas had that long to end its calls as E_INTERRUPTED.
// Now a renewal is made as soon as the listener loses its connection, and
// again every second until the database answers. (The lease is an hour
// here: the regular renewal, every 20 minutes, does not come.)
func TestLeasesRenewedOnceTheDatabaseAnswersAgain(t *testing.T) {
	dbURL := testURL(t)
	schema := storetest.PostgresSchema(t, dbURL)
	p, through := newPartition(t, dbURL)
	a := open(t, postgres.Options{URL: through, Schema: schema, Lease: time.Hour, ConnectTimeout: time.Second})
	ctx := t.Context()
	r := &registry.CallRecord{CallerID: "c", ToolCallID: "long", ToolName: "http__get", ArgumentsDigest: "d", State: registry.CallRunning}
	if _, created, err := a.BeginCall(ctx, r); err != nil || !created {
		t.Fatal(created, err)
	}
	p.Stop(true)
	conn := schemaConn(t, dbURL, schema)
	if _, err := conn.Exec(ctx, `UPDATE calls SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	failPings(t, a, 2)
	p.Heal()
	for i := 0; ; i++ {
		var lapsed bool
		if err := conn.QueryRow(ctx, `SELECT expires_at <= now() FROM calls WHERE tool_call_id = 'long'`).Scan(&lapsed); err != nil {
			t.Fatal(err)
		}
		if !lapsed {
			break
		}
		if i == 300 {
			t.Fatal("30 s after the database answered again, the lease of the call the replica runs was still lapsed")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestProbeRowsOfGoneInstancesAreDeleted: every start of a replica adds a
// row to the readiness probe's table (its random instance id); rows of
// instances not heard from for an hour go at the sweep, not only after
// the whole retention (24 h by default).
func TestProbeRowsOfGoneInstancesAreDeleted(t *testing.T) {
	dbURL := testURL(t)
	schema := storetest.PostgresSchema(t, dbURL)
	s := open(t, postgres.Options{URL: dbURL, Schema: schema})
	ctx := t.Context()
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	conn := schemaConn(t, dbURL, schema)
	if _, err := conn.Exec(ctx, `INSERT INTO probe (instance, at) VALUES
		('gone', now() - interval '2 hours'), ('recent', now() - interval '10 minutes')`); err != nil {
		t.Fatal(err)
	}
	// Its own row, written long ago, is its own to rewrite.
	if _, err := conn.Exec(ctx, `UPDATE probe SET at = now() - interval '3 hours' WHERE instance = $1`, s.InstanceID()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteExpired(ctx, time.Now().Add(-24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, `SELECT instance FROM probe ORDER BY instance`)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		left = append(left, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{s.InstanceID(), "recent"}
	if fmt.Sprint(left) != fmt.Sprint(want) {
		t.Errorf("probe rows after the sweep: %v; want %v (the row of an instance gone for 2 hours deleted)", left, want)
	}
}
