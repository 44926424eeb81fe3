// Package telemetry sets up what toolsvc is observed with: the Prometheus
// registry (with the Go runtime and process collectors), the OpenTelemetry
// tracer provider chosen by the standard OTEL_* settings, and the log/slog
// handler that puts trace and span ids on every line and keeps secrets out
// of the log.
//
// The service's own instruments live with the code they measure: the
// executor's in internal/registry, the HTTP server's in internal/http. This
// package only builds the shared pieces they are registered with.
package telemetry

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// NewRegistry returns a Prometheus registry holding the Go runtime and
// process collectors and toolsvc_build_info{version,goversion} (always 1),
// so a dashboard can show which version runs where.
func NewRegistry(version string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "toolsvc_build_info",
		Help:        "The running toolsvc version; always 1.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
	})
	info.Set(1)
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		info,
	)
	return reg
}
