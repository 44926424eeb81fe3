package main

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
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
	// console is what the console exporter writes to stdout through; nil
	// with another exporter.
	console *telemetry.BufferedWriter
	// shutdownTimeout is TOOLSVC_SHUTDOWN_TIMEOUT, and stopping when the
	// stop began (the context of newObservability ended), in Unix
	// nanoseconds, 0 before: serve's drain ends by their sum, and so does
	// the flush of the spans after it.
	shutdownTimeout time.Duration
	stopping        atomic.Int64
	unwatch         func() bool
}

// tracing is the tracer provider's configuration.
func (c Config) tracing(console io.Writer) telemetry.TracingOptions {
	endpoint := c.OTLPTracesEndpoint
	if endpoint == "" {
		endpoint = c.OTLPEndpoint
	}
	// The exporter reads these itself; they are here to be checked.
	env := func(name string) string { v, _ := c.lookupEnv(name); return v }
	return telemetry.TracingOptions{
		Exporter:     c.TracesExporter,
		OTLPEndpoint: endpoint,
		OTLP: telemetry.OTLPSettings{
			Endpoint: c.OTLPEndpoint, TracesEndpoint: c.OTLPTracesEndpoint,
			Protocol: env("OTEL_EXPORTER_OTLP_PROTOCOL"), TracesProtocol: env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
			Timeout: env("OTEL_EXPORTER_OTLP_TIMEOUT"), TracesTimeout: env("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"),
		},
		Sampler:        c.TracesSampler,
		SamplerArg:     c.TracesSamplerArg,
		ServiceName:    c.ServiceName,
		ServiceVersion: version,
		Console:        console,
	}
}

// newObservability builds the metrics registry and the tracer provider;
// console spans go to stdout, through a writer that never makes a call
// wait for stdout. The caller must close it, which flushes the spans
// still queued.
func newObservability(ctx context.Context, cfg Config, stdout io.Writer, log *slog.Logger) (*observability, error) {
	metrics := telemetry.NewRegistry(version)
	o := &observability{metrics: metrics, executor: registry.NewMetrics(metrics), shutdownTimeout: cfg.ShutdownTimeout}
	o.unwatch = context.AfterFunc(ctx, func() { o.stopping.Store(time.Now().UnixNano()) })
	warnUnexportedSignals(cfg, log)
	if cfg.SDKDisabled {
		o.tracers, o.shutdown = noop.NewTracerProvider(), func(context.Context) error { return nil }
		log.Info("tracing disabled (OTEL_SDK_DISABLED)")
		return o, nil
	}
	// The SDK's exporters report a setting they cannot read through
	// OpenTelemetry's logger, and a failed export (an unreachable
	// collector) through its error handler. Both are the library's own
	// process-wide variables, not state of ours, and nothing lets us pass
	// them to the exporters instead; set them here, in the run wiring and
	// before the exporter is built, so what they say reaches the
	// service's log like its other lines rather than as a plain-text line
	// on the process's stderr.
	otel.SetLogger(logr.FromSlogHandler(log.With("logger", "opentelemetry").Handler()))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("opentelemetry", "error", err) }))
	opts := cfg.tracing(nil)
	if opts.ExporterName() == telemetry.ExporterConsole {
		o.console = telemetry.NewSpanWriter(stdout)
		opts.Console = o.console
		metrics.MustRegister(o.console) // toolsvc_console_spans_dropped_total
	}
	tp, err := telemetry.NewTracerProvider(ctx, opts)
	if err != nil {
		o.unwatch()
		if o.console != nil {
			_ = o.console.Close()
		}
		return nil, err
	}
	o.tracers, o.shutdown = tp, tp.Shutdown
	sampler := cfg.TracesSampler
	if sampler == "" {
		sampler = "parentbased_always_on"
	}
	log.Info("tracing", "exporter", opts.ExporterName(), "sampler", sampler, "recordContent", cfg.TraceContent)
	return o, nil
}

// warnUnexportedSignals logs, once, the OTEL_*_EXPORTER settings of the
// signals toolsvc does not export over OpenTelemetry: they do nothing.
func warnUnexportedSignals(cfg Config, log *slog.Logger) {
	var set []any
	for _, name := range []string{"OTEL_METRICS_EXPORTER", "OTEL_LOGS_EXPORTER"} {
		if v, _ := cfg.lookupEnv(name); v != "" && v != telemetry.ExporterNone {
			set = append(set, name, v)
		}
	}
	if len(set) > 0 {
		log.Warn("only traces are exported over OpenTelemetry (OTEL_TRACES_EXPORTER): metrics are served at GET /metrics for Prometheus to scrape and the log goes to stderr, so these settings do nothing", set...)
	}
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

// close flushes and stops the tracer provider, then writes out the
// console spans still held (waiting at most telemetry.LogFlushTimeout).
// The flush gets what is left of TOOLSVC_SHUTDOWN_TIMEOUT since the stop
// began, as the last attempt at the records does (flushRecords): at most
// 5 s, at least 1 s.
func (o *observability) close(log *slog.Logger) {
	o.unwatch()
	now := time.Now()
	began := now // serve returned without being stopped
	if ns := o.stopping.Load(); ns != 0 {
		began = time.Unix(0, ns)
	}
	ctx, cancel := context.WithDeadline(context.Background(), spanFlushDeadline(now, began.Add(o.shutdownTimeout)))
	defer cancel()
	if err := o.shutdown(ctx); err != nil {
		log.Warn("flushing spans", "error", err)
	}
	if o.console != nil {
		if err := o.console.Close(); err != nil {
			log.Warn("writing console spans to stdout", "error", err)
		}
	}
}

// spanFlushDeadline is when the flush of the spans, starting now, must
// end for a stop due by end: end, but no later than 5 s from now and no
// sooner than 1 s from now.
func spanFlushDeadline(now, end time.Time) time.Time {
	if latest := now.Add(5 * time.Second); end.After(latest) {
		return latest
	}
	if earliest := now.Add(time.Second); end.Before(earliest) {
		return earliest
	}
	return end
}
