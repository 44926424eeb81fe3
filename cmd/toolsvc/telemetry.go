package main

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/telemetry"
)

// observability is what the process is observed with: one Prometheus
// registry for every metric, the executor's instruments on it, and the
// tracer provider.
type observability struct {
	metrics  *prometheus.Registry
	executor *registry.Metrics
	tracers  trace.TracerProvider
	shutdown func(context.Context) error
}

// tracing is the tracer provider's configuration.
func (c Config) tracing(console io.Writer) telemetry.TracingOptions {
	endpoint := c.OTLPTracesEndpoint
	if endpoint == "" {
		endpoint = c.OTLPEndpoint
	}
	return telemetry.TracingOptions{
		Exporter:       c.TracesExporter,
		OTLPEndpoint:   endpoint,
		Sampler:        c.TracesSampler,
		SamplerArg:     c.TracesSamplerArg,
		ServiceName:    c.ServiceName,
		ServiceVersion: version,
		Console:        console,
	}
}

// newObservability builds the metrics registry and the tracer provider;
// console spans go to stdout. The caller must close it, which flushes the
// spans still queued.
func newObservability(ctx context.Context, cfg Config, stdout io.Writer, log *slog.Logger) (*observability, error) {
	metrics := telemetry.NewRegistry(version)
	o := &observability{metrics: metrics, executor: registry.NewMetrics(metrics)}
	if cfg.SDKDisabled {
		o.tracers, o.shutdown = noop.NewTracerProvider(), func(context.Context) error { return nil }
		log.Info("tracing disabled (OTEL_SDK_DISABLED)")
		return o, nil
	}
	opts := cfg.tracing(stdout)
	tp, err := telemetry.NewTracerProvider(ctx, opts)
	if err != nil {
		return nil, err
	}
	// The exporters report failures (an unreachable collector) only
	// through OpenTelemetry's global error handler; send them to the log.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("opentelemetry", "error", err) }))
	o.tracers, o.shutdown = tp, tp.Shutdown
	sampler := cfg.TracesSampler
	if sampler == "" {
		sampler = "parentbased_always_on"
	}
	log.Info("tracing", "exporter", opts.ExporterName(), "sampler", sampler, "recordContent", cfg.TraceContent)
	return o, nil
}

// countApprovals keeps toolsvc_approvals_pending at the number of pending
// approval requests in the store, which every replica shares, reading it
// every interval until ctx ends.
func countApprovals(ctx context.Context, st registry.Store, m *registry.Metrics, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		pending, err := st.CountApprovals(ctx, registry.ApprovalFilter{Status: registry.ApprovalPending})
		switch {
		case err == nil:
			m.SetApprovalsPending(pending)
		case ctx.Err() == nil:
			log.Debug("counting pending approvals", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// close flushes and stops the tracer provider.
func (o *observability) close(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := o.shutdown(ctx); err != nil {
		log.Warn("flushing spans", "error", err)
	}
}
