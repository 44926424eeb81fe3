package http

import (
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
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
func (s *Server) telemetry() func(http.Handler) http.Handler {
	var m *httpMetrics
	if s.deps.Registerer != nil {
		m = newHTTPMetrics(s.deps.Registerer)
	}
	measure := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			if m != nil {
				m.inFlight.Inc()
				defer m.inFlight.Dec()
			}
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r)
			route := chi.RouteContext(r.Context()).RoutePattern()
			if route == "" {
				route = UnmatchedRoute
			}
			method := methodLabel(r.Method)
			span := trace.SpanFromContext(r.Context())
			span.SetName(method + " " + route)
			span.SetAttributes(attribute.String("http.route", route))
			if m == nil {
				return
			}
			status := ww.Status()
			if status == 0 {
				status = http.StatusOK // nothing written: net/http sends 200
			}
			m.requests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
			observeWithTrace(m.duration.WithLabelValues(method, route), span.SpanContext(), time.Since(start).Seconds())
		})
	}
	if s.deps.TracerProvider == nil {
		return measure
	}
	traced := otelhttp.NewMiddleware("http.server",
		otelhttp.WithTracerProvider(s.deps.TracerProvider),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		// Probes and scrapes every few seconds would bury the calls.
		otelhttp.WithFilter(func(r *http.Request) bool {
			return r.URL.Path != "/healthz" && r.URL.Path != "/readyz" && r.URL.Path != "/metrics"
		}),
		// The route is known only after routing; measure renames the span.
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return methodLabel(r.Method) }),
	)
	return func(next http.Handler) http.Handler { return traced(measure(next)) }
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

// observeWithTrace records v with the trace id as an exemplar when the
// span is sampled (exposed to OpenMetrics scrapes only).
func observeWithTrace(o prometheus.Observer, sc trace.SpanContext, v float64) {
	if eo, ok := o.(prometheus.ExemplarObserver); ok && sc.IsSampled() {
		eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String()})
		return
	}
	o.Observe(v)
}
