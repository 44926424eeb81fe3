package custom

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/toolsvc/toolsvc/internal/config"
	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// errorBodyLimit bounds what is kept of a non-2xx answer for the
// message: its first quarter from the beginning and the rest from the
// end, where the backend's error (a traceback's last line, say) usually
// is, as for an exec tool's stderr; the executor cuts the message further
// to the tool's errorMessageLimit, also keeping its beginning and end.
// errorBodyRead bounds what is read of it to find that end.
const (
	errorBodyLimit = 16 << 10
	errorBodyRead  = 64 << 20
)

type httpBackend struct {
	url       string
	headers   http.Header
	client    *http.Client
	prop      propagation.TextMapPropagator
	userAgent string
}

// NewTransport returns the transport HTTP tools use when Options has
// none: no proxy from the environment, bounded dial and TLS handshake.
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

func newHTTP(r *config.Resource, s *HTTPSpec, o Options) (*httpBackend, error) {
	u, err := url.Parse(s.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, r.Errorf("http.url %q must be an absolute http or https URL", s.URL)
	}
	b := &httpBackend{url: u.String(), headers: http.Header{}, prop: o.Propagator, userAgent: o.UserAgent}
	for name, v := range s.Headers {
		if !validHeaderName(name) {
			return nil, r.Errorf("http.headers: %q is not a valid header name", name)
		}
		val, err := v.Resolve(o.LookupEnv, r.Dir())
		if err != nil {
			return nil, r.Errorf("http.headers.%s: %v", name, err)
		}
		if strings.ContainsAny(val, "\r\n\x00") {
			return nil, r.Errorf("http.headers.%s: the value contains a line break or NUL", name)
		}
		b.headers.Set(name, val)
	}
	tr := o.Transport
	if tr == nil {
		own := NewTransport()
		// A reload builds the tools again, each with a transport of its
		// own, and the old ones would keep their idle connections (and
		// their two goroutines each) for IdleConnTimeout. Once nothing
		// holds this backend (its registry was replaced and its calls have
		// finished), nothing can send on the transport again: close them.
		runtime.AddCleanup(b, (*http.Transport).CloseIdleConnections, own)
		tr = own
	}
	b.client = &http.Client{
		Transport: tr,
		// The operator's URL is trusted, what it redirects to is not.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return b, nil
}

func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range name {
		if c > 0x7e || c <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c) {
			return false
		}
	}
	return true
}

func (b *httpBackend) run(ctx context.Context, req *registry.Request, export string) (any, error) {
	body, err := envelope(req, export)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Accept", "application/json")
	if b.userAgent != "" {
		hreq.Header.Set("User-Agent", b.userAgent)
	}
	for k, v := range b.headers {
		hreq.Header[k] = v
	}
	hreq.Header.Set("Content-Type", "application/json")
	b.prop.Inject(ctx, propagation.HeaderCarrier(hreq.Header))
	resp, err := b.client.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// The url.Error would repeat the URL, which may carry a key in its
		// query: say only what went wrong.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, backendError("the tool's backend could not be reached: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		what := fmt.Sprintf("the tool's backend answered %s", resp.Status)
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			what += " (redirects are not followed)"
		}
		return nil, &registry.Error{Code: registry.CodeTool, Message: what + errorBody(resp.Body)}
	}
	limit := req.MaxOutputBytes
	if limit <= 0 {
		limit = defaultOutputLimit
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, backendError("reading the tool's backend answer failed: %v", err)
	}
	if len(data) <= limit {
		return output(data, false), nil
	}
	// Cut: keep what fits, escaped, as a string with the longest marker
	// countRest can write, count the rest, and keep all of it where the
	// service spills.
	keep := registry.QuotedPrefix(string(data), max(limit-markerRoom(req.CallID)-2, 256))
	total, marker := countRest(ctx, req, data, resp.Body, int64(keep))
	req.ReportTruncated(total)
	return string(bytes.ToValidUTF8(data[:keep], nil)) + "\n" + marker, nil
}

// errorBody is what the message of a non-2xx answer says of its body:
// all of it, or, said first (the executor may cut the middle of a long
// message), how long it was and that its beginning and end follow, then
// those around a mark of what was left out. A body that was still going
// at errorBodyRead is said to be at least that long: its end is not known.
func errorBody(body io.Reader) string {
	c := sandbox.NewHeadTail(errorBodyLimit, errorBodyLimit/4)
	_, _ = io.Copy(c, io.LimitReader(body, errorBodyRead+1)) // an error ends the body: say what came
	head, tail, omitted := c.Parts()
	text := strings.TrimSpace(headTail(head, tail, omitted, "the body", errorBodyLimit))
	switch {
	case text == "":
		return ""
	case omitted == 0:
		return ": " + text
	case c.Total() > errorBodyRead:
		return fmt.Sprintf(" with a body longer than %d MiB, read no further; its first %d and last %d bytes read: %s",
			errorBodyRead>>20, len(head), len(tail), text)
	}
	return fmt.Sprintf(" with a body of %d bytes; its first %d and last %d bytes: %s", c.Total(), len(head), len(tail), text)
}

// countBound bounds how much of a cut answer is read to count (and keep) it.
const countBound = 256 << 20

// markerRoom is the most bytes countRest's marker of call id's answer
// takes in a JSON string, with the newline before it.
func markerRoom(id string) int {
	const big = countBound
	n := 0
	for _, spill := range []*registry.SpillInfo{{TotalBytes: big}, {TotalBytes: big, Unreadable: true}} {
		m := fmt.Sprintf("[the answer is at least %d bytes; counting stopped there] ", big) +
			registry.CutMarker(big, big, id, "body", big, spill)
		n = max(n, registry.QuotedLen(m))
	}
	return n
}

// countRest reads the rest of an answer cut at keep (read holds what was
// read) to count it, within the call's deadline and countBound, spilling
// all of it when the service keeps cut outputs. It returns the answer's
// size and the marker that says so.
func countRest(ctx context.Context, req *registry.Request, read []byte, body io.Reader, keep int64) (int64, string) {
	total, exact, spill := req.CountRest(ctx, "body", read, body, countBound)
	marker := registry.CutMarker(total-keep, total, req.CallID, "body", keep, spill)
	if !exact {
		marker = fmt.Sprintf("[the answer is at least %d bytes; counting stopped there] ", total) + marker
	}
	return total, marker
}
