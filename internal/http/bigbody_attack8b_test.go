package http

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/tools/fs"
	"github.com/toolsvc/toolsvc/internal/tools/workspace"
)

// countingBody is a request body that counts the bytes read of it.
type countingBody struct {
	r    io.Reader
	read atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c *countingBody) Close() error { return nil }

// TestRequestBodiesHaveABudget: the bodies of calls held at once are
// bounded service-wide, not only each by itself. 800 connections each
// sending a body of 1 MB held 4 GB, and the 672 of them the executor
// refused with 429 cost it too: admitCall read every body before anything
// was refused. A body is now held against MaxRequestBytesInFlight from
// before it is read until its request ends; one that does not fit is
// answered 429 overloaded, with Retry-After, before a byte of it is read
// (a chunked one as soon as it stops fitting). The budget follows what
// arrives, so a body that declares a megabyte and sends nothing holds
// only its first piece, and every byte is given back when the requests
// end.
func TestRequestBodiesHaveABudget(t *testing.T) {
	started, release := make(chan struct{}, 4), make(chan struct{})
	metrics := prometheus.NewRegistry()
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		d.Limits.MaxRequestBytes = 1 << 20
		d.Limits.MaxRequestBytesInFlight = 2 << 20
		d.Registerer = metrics
		reg, err := registry.New(registry.Defaults{Timeout: 10 * time.Second}, &registry.Tool{
			Definition: registry.Definition{Name: "test__hold", Description: "holds", Tier: registry.ReadOnly, Parameters: json.RawMessage(`{"type":"object"}`)},
			Handler: registry.Func(func(ctx context.Context, r *registry.Request) (any, error) {
				started <- struct{}{}
				<-release
				return "done", nil
			}),
		})
		if err != nil {
			t.Fatal(err)
		}
		o.Registry = reg
	})
	big := func(n int) string {
		return `{"toolName":"test__hold","arguments":{"pad":"` + strings.Repeat("a", n-48) + `"}}`
	}
	const mb = 1000000
	if len(big(mb)) != mb {
		t.Fatalf("big(mb) is %d bytes", len(big(mb)))
	}
	// Two calls of 1 MB hold 2,000,000 bytes of the 2,097,152.
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			resp, err := http.Post(e.ts.URL+"/calls", "application/json", strings.NewReader(big(mb)))
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("a call within the budget: %s", resp.Status)
			}
		})
	}
	<-started
	<-started
	if got := e.srv.bodies.used.Load(); got != 2*mb {
		t.Errorf("bytes held by the two calls: %d, want %d", got, 2*mb)
	}
	// The metrics show the same.
	gauge := func(name string) float64 {
		t.Helper()
		mfs, err := metrics.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	if held, limit := gauge("toolsvc_request_body_bytes_in_flight"), gauge("toolsvc_request_body_bytes_in_flight_limit"); held != 2*mb || limit != 2<<20 {
		t.Errorf("toolsvc_request_body_bytes_in_flight %v of %v, want %d of %d", held, limit, 2*mb, 2<<20)
	}
	serve := func(body io.Reader, size int64) (*httptest.ResponseRecorder, *countingBody) {
		cb := &countingBody{r: body}
		req := httptest.NewRequest("POST", "/calls", nil)
		req.Body, req.ContentLength = cb, size
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		e.srv.ServeHTTP(w, req)
		return w, cb
	}
	overloaded := func(what string, w *httptest.ResponseRecorder) {
		t.Helper()
		var p Problem
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != 429 || p.Code != "overloaded" || w.Header().Get("Retry-After") == "" ||
			!strings.Contains(p.Detail, "TOOLSVC_MAX_REQUEST_BYTES_IN_FLIGHT") {
			t.Errorf("%s: %d %s (Retry-After %q); want 429 overloaded naming TOOLSVC_MAX_REQUEST_BYTES_IN_FLIGHT", what, w.Code, w.Body, w.Header().Get("Retry-After"))
		}
	}
	// Declared: refused before a byte is read.
	w, cb := serve(strings.NewReader(big(mb)), mb)
	overloaded("a third call of 1 MB", w)
	if n := cb.read.Load(); n != 0 {
		t.Errorf("the refused body was read: %d bytes", n)
	}
	// Chunked: refused once it stops fitting.
	w, cb = serve(strings.NewReader(big(mb)), -1)
	overloaded("a third call of 1 MB, chunked", w)
	if n := cb.read.Load(); n >= mb {
		t.Errorf("the refused chunked body was read whole: %d bytes", n)
	}
	if n := testutil.ToFloat64(e.srv.bodies.refused); n != 2 {
		t.Errorf("toolsvc_request_body_budget_refused_total = %v, want 2", n)
	}
	// A small call that fits is taken.
	small := `{"toolName":"nope__none"}`
	if w, _ := serve(strings.NewReader(small), int64(len(small))); w.Code != 200 || !strings.Contains(w.Body.String(), "E_TOOL_NOT_FOUND") {
		t.Errorf("a small call that fits: %d %s", w.Code, w.Body)
	}
	close(release)
	wg.Wait()
	if got := e.srv.bodies.used.Load(); got != 0 {
		t.Errorf("bytes held once every request ended: %d", got)
	}
	// A body that declares 1 MB and sends 100 bytes holds its first piece
	// only.
	pr, pw := io.Pipe()
	trickled := make(chan *httptest.ResponseRecorder)
	go func() {
		w, _ := serve(pr, mb)
		trickled <- w
	}()
	if _, err := pw.Write([]byte(big(mb)[:100])); err != nil {
		t.Fatal(err)
	}
	if got := e.srv.bodies.used.Load(); got != firstPiece {
		t.Errorf("a body of which 100 bytes arrived holds %d bytes of the budget, want %d", got, firstPiece)
	}
	pw.CloseWithError(io.ErrUnexpectedEOF)
	if w := <-trickled; w.Code != 400 {
		t.Errorf("a body cut short: %d %s", w.Code, w.Body)
	}
	// With the budget free, a body of 1 MB runs.
	go func() { <-started }()
	if w, _ := serve(strings.NewReader(big(mb)), mb); w.Code != 200 {
		t.Errorf("a call once the budget is free: %d %.200s", w.Code, w.Body)
	}
	if got := e.srv.bodies.used.Load(); got != 0 {
		t.Errorf("bytes held once every request ended: %d", got)
	}
}

// TestBodyBudgetRead: the body as sent, whatever its framing, with the
// errors readBody gave: a body over the limit, one cut short.
func TestBodyBudgetRead(t *testing.T) {
	b := &bodyBudget{max: 1 << 30}
	for _, n := range []int{0, 1, 100, firstPiece - 1, firstPiece, firstPiece + 1, 4*firstPiece + 7, 1 << 20} {
		body := bytes.Repeat([]byte("x"), n)
		for _, size := range []int64{int64(n), -1} {
			got, held, err := b.read(bytes.NewReader(body), size, 1<<20)
			if err != nil || !bytes.Equal(got, body) || held != int64(cap(got)) || (size >= 0 && cap(got) != n) {
				t.Errorf("%d bytes, size %d: %d bytes (cap %d, held %d), %v", n, size, len(got), cap(got), held, err)
			}
			b.release(held)
		}
	}
	var mbe *http.MaxBytesError
	if _, held, err := b.read(http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(bytes.NewReader(make([]byte, 1000))), 999), -1, 999); !errorsAs(err, &mbe) {
		t.Errorf("a chunked body over the limit: %v", err)
	} else {
		b.release(held)
	}
	if _, held, err := b.read(bytes.NewReader(make([]byte, 10)), 20, 100); err != io.ErrUnexpectedEOF {
		t.Errorf("a body shorter than declared: %v", err)
	} else {
		b.release(held)
	}
	if got := b.used.Load(); got != 0 {
		t.Errorf("held after every read was released: %d", got)
	}
}

func errorsAs(err error, target any) bool {
	return err != nil && reflect.TypeOf(err) == reflect.TypeOf(target).Elem()
}

func TestDefaultRequestBytesInFlight(t *testing.T) {
	for _, c := range []struct{ limit, mem, want int64 }{
		{1 << 20, math.MaxInt64, 32 << 20},
		{1 << 20, 768 << 20, 32 << 20},
		{1 << 20, 256 << 20, 16 << 20},
		{16 << 20, 64 << 20, 16 << 20}, // never below one body at the limit
	} {
		if got := defaultRequestBytesInFlight(c.limit, c.mem); got != c.want {
			t.Errorf("defaultRequestBytesInFlight(%d, %d) = %d, want %d", c.limit, c.mem, got, c.want)
		}
	}
}

// TestCallsReadInPlaceAsTheDecoderRead: decodeCall reads a call whose
// members are all the call's own with json.Unmarshal, in place, rather
// than with a Decoder that refuses unknown members (which copied a body
// of 1 MB into 3 MB of buffers); for such a call both read the same.
func TestCallsReadInPlaceAsTheDecoderRead(t *testing.T) {
	for _, body := range decodeSeeds {
		checkDecodePaths(t, []byte(body))
	}
}

func FuzzCallsReadInPlaceAsTheDecoderRead(f *testing.F) {
	for _, body := range decodeSeeds {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if json.Valid(raw) {
			checkDecodePaths(t, raw)
		}
	})
}

var decodeSeeds = []string{
	`{"toolName":"t","arguments":{"a":1}}`,
	`{"toolName":"t","toolCallId":"c","arguments":"{\"a\":1}","timeoutMs":5,"catalog":["x"],"context":{"instanceKey":"k","agentName":"a","turnId":"t"},"approval":{"granted":true,"by":"me"},"record":true}`,
	`{"toolName":"t","context":{"instanceKey":"k","extra":1}}`,
	`{"toolName":"t","approval":{"granted":"yes"}}`,
	`{"toolName":5,"zzz":1}`,
	`{"zzz":1,"toolName":5}`,
	`{"toolName":"t","timeoutMs":"5"}`,
	`{"toolName":"t","timeoutMs":1.5}`,
	`{"toolName":"t","catalog":"x"}`,
	`{"toolName":"t","context":null,"approval":null,"arguments":null}`,
	`{"id":"c","type":"function","function":{"name":"t","arguments":"{}"}}`,
	`{"id":"c","type":"function","function":{"name":"t","arguments":"{}","extra":1}}`,
	`{"type":"tool_use","id":"c","name":"t","input":{"a":1},"cache_control":{}}`,
	`{"type":"function_call","call_id":"c","name":"t","arguments":"{}","status":"done"}`,
	`{"functionCall":{"id":"c","name":"t","args":{"a":[1,2]}},"thoughtSignature":"x"}`,
	`{"functionCall":{"name":5}}`,
	`{"toolName":"t\u00e9\ud83d\ude00","toolCallId":"\u0000"}`,
	`{"toolName":"t","arguments":{"toolName":"inner","zzz":1}}`,
	`{"toolName":"t","context":{"instanceKey":{"a":1}}}`,
	`{"toolName":"t","function":null}`,
	`{}`,
}

// checkDecodePaths checks that where checkAll finds only members the call
// has, json.Unmarshal reads raw as the refusing Decoder did.
func checkDecodePaths(t *testing.T, raw []byte) {
	t.Helper()
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return
	}
	e, others := callShape.checkAll(raw)
	if e != nil || others {
		return
	}
	var viaDecoder, inPlace wireCall
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	derr := dec.Decode(&viaDecoder)
	uerr := json.Unmarshal(raw, &inPlace)
	if fmt.Sprint(derr) != fmt.Sprint(uerr) || !reflect.DeepEqual(viaDecoder, inPlace) {
		t.Errorf("%s: the Decoder read %+v, %v; Unmarshal read %+v, %v", raw, viaDecoder, derr, inPlace, uerr)
	}
}

// BenchmarkBigWrite is POST /calls of an fs__write of 1 MB, through a
// real server and store: the bytes each call allocates.
func BenchmarkBigWrite(b *testing.B) {
	ws, err := workspace.New(b.TempDir(), workspace.Options{})
	if err != nil {
		b.Fatal(err)
	}
	st := openStore(b)
	e := newEnv(b, func(d *Deps, o *registry.Options) {
		reg, err := registry.New(registry.Defaults{Timeout: 10 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, fs.Tools(fs.Options{Workspace: ws})...)
		if err != nil {
			b.Fatal(err)
		}
		o.Registry = reg
		o.Store = st
	})
	body := []byte(`{"toolName":"fs__write","arguments":{"path":"big.txt","content":"` + strings.Repeat("a", 1000000-70) + `"}}`)
	client := e.ts.Client()
	b.ReportAllocs()
	for b.Loop() {
		readOK(b)(client.Post(e.ts.URL+"/calls", "application/json", bytes.NewReader(body)))
	}
}

// BenchmarkReadBody compares reading a body of 1 MB as readBody does
// (io.ReadAll) and as admitCall does (bodyBudget.read), with its length
// declared and chunked.
func BenchmarkReadBody(b *testing.B) {
	body := bytes.Repeat([]byte("a"), 1000000)
	budget := &bodyBudget{max: 1 << 30}
	b.Run("ReadAll", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := io.ReadAll(bytes.NewReader(body)); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, size := range []int64{int64(len(body)), -1} {
		b.Run(fmt.Sprintf("budget,size=%d", size), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, held, err := budget.read(bytes.NewReader(body), size, 1<<20)
				if err != nil {
					b.Fatal(err)
				}
				budget.release(held)
			}
		})
	}
}
