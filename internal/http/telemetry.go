package http

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// UnmatchedRoute is the route label of requests no route matched, so
// scanners probing random paths cannot grow the number of series.
const UnmatchedRoute = "unmatched"

// httpMetrics are the HTTP server's Prometheus instruments, labelled by
// chi route pattern, never by raw path.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inFlight prometheus.Gauge
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	f := promauto.With(reg)
	return &httpMetrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "toolsvc_http_requests_total",
			Help: "HTTP requests by method, route pattern and status code.",
		}, []string{"method", "route", "code"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "toolsvc_http_request_duration_seconds",
			Help:    "Duration of HTTP requests by method and route pattern, until the response is written.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"method", "route"}),
		inFlight: f.NewGauge(prometheus.GaugeOpts{
			Name: "toolsvc_http_requests_in_flight",
			Help: "HTTP requests being served now.",
		}),
	}
}

// telemetry returns the middleware that traces and measures every request:
// an OpenTelemetry server span (continuing a W3C traceparent from the
// client) named "{method} {route}" once the route is known, and the HTTP
// metrics. It must be the first middleware, so the log lines and spans of
// everything after it belong to the request's span.
//
// The span is started here rather than by otelhttp's middleware, which
// computed its request attributes, wrapped the body and the writer and
// recorded metrics into a no-op meter on every request, sampled or not
// (8 % of the CPU of a read-only call). Attributes follow the same HTTP
// semantic conventions and are set only on spans that record.
func (s *Server) telemetry() func(http.Handler) http.Handler {
	var m *httpMetrics
	if s.deps.Registerer != nil {
		m = newHTTPMetrics(s.deps.Registerer)
	}
	var tracer trace.Tracer
	traceContext := propagation.TraceContext{} // W3C traceparent and tracestate
	if s.deps.TracerProvider != nil {
		tracer = s.deps.TracerProvider.Tracer(tracerName)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			if m != nil {
				m.inFlight.Inc()
				defer m.inFlight.Dec()
			}
			method := methodLabel(r.Method)
			span := trace.SpanFromContext(r.Context())
			// Probes and scrapes every few seconds would bury the calls.
			if tracer != nil && !untraced(r.URL.Path) {
				ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
				ctx, span = tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer))
				defer span.End()
				r = r.WithContext(ctx)
				if span.IsRecording() {
					span.SetAttributes(requestAttributes(r, method)...)
				}
			}
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r)
			route := chi.RouteContext(r.Context()).RoutePattern()
			if route == "" {
				route = UnmatchedRoute
			}
			status := ww.Status()
			if status == 0 {
				status = http.StatusOK // nothing written: net/http sends 200
			}
			if span.IsRecording() {
				span.SetName(method + " " + route)
				attrs := []attribute.KeyValue{attribute.String("http.route", route)}
				if r.ContentLength > 0 {
					attrs = append(attrs, attribute.Int64("http.request.body.size", r.ContentLength))
				}
				span.SetAttributes(append(attrs, attribute.Int("http.response.body.size", ww.BytesWritten()),
					attribute.Int("http.response.status_code", status))...)
				if status >= 500 {
					span.SetStatus(codes.Error, "")
				}
			}
			if m == nil {
				return
			}
			m.requests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
			registry.ObserveWithTrace(m.duration.WithLabelValues(method, route), span.SpanContext(), time.Since(start).Seconds())
		})
	}
}

// tracerName is the instrumentation scope of the server spans.
const tracerName = "github.com/toolsvc/toolsvc/internal/http"

// untraced are the paths that get no span.
func untraced(path string) bool {
	return path == "/healthz" || path == "/readyz" || path == "/metrics"
}

// requestAttributes describe a request on its server span, by the HTTP
// semantic conventions, in the order otelhttp gave them.
func requestAttributes(r *http.Request, method string) []attribute.KeyValue {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	attrs := make([]attribute.KeyValue, 0, 12)
	host, port := splitHostPort(r.Host)
	attrs = append(attrs, attribute.String("server.address", clip(host)), attribute.String("http.request.method", method))
	if method == "_OTHER" {
		attrs = append(attrs, attribute.String("http.request.method_original", clip(r.Method)))
	}
	attrs = append(attrs, attribute.String("url.scheme", scheme))
	if port > 0 {
		attrs = append(attrs, attribute.Int("server.port", port))
	}
	peer, peerPort := splitHostPort(r.RemoteAddr)
	if peer != "" {
		attrs = append(attrs, attribute.String("network.peer.address", peer))
	}
	if peerPort > 0 {
		attrs = append(attrs, attribute.Int("network.peer.port", peerPort))
	}
	if ua := r.UserAgent(); ua != "" {
		attrs = append(attrs, attribute.String("user_agent.original", clip(ua)))
	}
	client := peer
	if fwd := r.Header.Get("X-Forwarded-For"); fwd != "" {
		first, _, _ := strings.Cut(fwd, ",")
		client = strings.TrimSpace(first)
	}
	if client != "" {
		attrs = append(attrs, attribute.String("client.address", clip(client)))
	}
	return append(attrs, attribute.String("url.path", clip(r.URL.Path)),
		attribute.String("network.protocol.version", strconv.Itoa(r.ProtoMajor)+"."+strconv.Itoa(r.ProtoMinor)))
}

// maxAttrBytes bounds each request attribute a client writes (Host,
// method, User-Agent, X-Forwarded-For, path). A span keeps its attributes
// until it is exported: 2,000 requests with a 900 KB User-Agent, queued
// for a collector that did not answer, held 1.8 GB.
const maxAttrBytes = 1024

// clip cuts s to maxAttrBytes on a character boundary, copying the cut so
// the span does not keep the whole header alive.
func clip(s string) string { return clipTo(s, maxAttrBytes) }

// clipTo cuts s to at most n bytes on a character boundary, copying the
// cut (so that a long request's bytes are not kept alive by it).
func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.Clone(registry.Clip(s, n))
}

// splitHostPort splits "host:port" (or a bare host); port is 0 when
// absent or not a number.
func splitHostPort(hostport string) (string, int) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport, 0
	}
	port, _ := strconv.Atoi(p)
	return host, port
}

// methodLabel keeps the method label to the standard methods.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "_OTHER"
}
