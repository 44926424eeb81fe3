package telemetry

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Exporter names, the values of OTEL_TRACES_EXPORTER toolsvc accepts.
const (
	ExporterOTLP    = "otlp"
	ExporterConsole = "console"
	ExporterNone    = "none"
)

// TracingOptions configure the tracer provider. The fields mirror the
// standard OTEL_* environment variables named on each, which the caller
// reads from its configuration.
//
// The OTLP exporter (OTEL_TRACES_EXPORTER=otlp) is built by the
// OpenTelemetry autoexport package, and it and the exporters it makes read
// their own settings (OTEL_EXPORTER_OTLP_PROTOCOL, _ENDPOINT, _HEADERS,
// _TIMEOUT, _CERTIFICATE, …) from the process environment, as does the
// resource detector for OTEL_RESOURCE_ATTRIBUTES.
type TracingOptions struct {
	// Exporter is OTEL_TRACES_EXPORTER: "otlp", "console" or "none".
	// Empty means otlp when OTLPEndpoint is set and none otherwise, so a
	// machine without a collector does not log export failures.
	Exporter string
	// OTLPEndpoint is OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT; it only chooses the default exporter.
	OTLPEndpoint string
	// OTLP are the OTLP exporter's settings as the environment has them,
	// for Validate to check: the exporter reads them from the process
	// environment itself, and ignores one it cannot read with no more
	// than a line to OpenTelemetry's logger, so a typo would send spans
	// to the default endpoint without a word.
	OTLP OTLPSettings
	// Sampler and SamplerArg are OTEL_TRACES_SAMPLER and
	// OTEL_TRACES_SAMPLER_ARG; empty is parentbased_always_on.
	Sampler, SamplerArg string
	// ServiceName is OTEL_SERVICE_NAME; empty is "toolsvc".
	ServiceName string
	// ServiceVersion is the service.version resource attribute.
	ServiceVersion string
	// Console receives the spans of the console exporter, one JSON object
	// per span and per Write, as each span ends, by the goroutine that
	// ends it: a writer that can block (stdout) would block the call, so
	// the service gives a NewSpanWriter. Nil discards them.
	Console io.Writer
	// SpanProcessors are added to the provider besides the exporter's
	// (tests add an in-memory exporter).
	SpanProcessors []sdktrace.SpanProcessor
}

// OTLPSettings are the OTEL_EXPORTER_OTLP_* variables that say where and
// how the OTLP exporter sends spans; empty is unset.
type OTLPSettings struct {
	// Endpoint and TracesEndpoint are OTEL_EXPORTER_OTLP_ENDPOINT and
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, the latter in force when set.
	Endpoint, TracesEndpoint string
	// Protocol and TracesProtocol are OTEL_EXPORTER_OTLP_PROTOCOL and
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: grpc or http/protobuf (the
	// default).
	Protocol, TracesProtocol string
	// Timeout and TracesTimeout are OTEL_EXPORTER_OTLP_TIMEOUT and
	// OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, in milliseconds.
	Timeout, TracesTimeout string
}

// Validate reports the settings the OTLP exporter would not use: an
// endpoint it cannot parse or send to (it would send to localhost
// instead), a protocol autoexport does not know, a timeout that is not a
// positive whole number of milliseconds (it would keep the default).
// Only the variables in force are checked: the TRACES_ one when it is set,
// the general one otherwise.
func (s OTLPSettings) Validate() error {
	protocolVar, protocol := "OTEL_EXPORTER_OTLP_PROTOCOL", s.Protocol
	if s.TracesProtocol != "" {
		protocolVar, protocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", s.TracesProtocol
	}
	switch protocol {
	case "", "http/protobuf", "grpc":
	default:
		return fmt.Errorf("%s must be http/protobuf or grpc, got %q", protocolVar, protocol)
	}
	// The exporters trim the variables they read; empty is unset.
	endpointVar, endpoint := "OTEL_EXPORTER_OTLP_ENDPOINT", strings.TrimSpace(s.Endpoint)
	if e := strings.TrimSpace(s.TracesEndpoint); e != "" {
		endpointVar, endpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", e
	}
	if endpoint != "" {
		if err := checkOTLPEndpoint(endpoint, protocol == "grpc"); err != nil {
			return fmt.Errorf("%s %w", endpointVar, err)
		}
	}
	timeoutVar, timeout := "OTEL_EXPORTER_OTLP_TIMEOUT", strings.TrimSpace(s.Timeout)
	if t := strings.TrimSpace(s.TracesTimeout); t != "" {
		timeoutVar, timeout = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", t
	}
	if timeout != "" {
		// A whole number of milliseconds, as the exporters parse it; 0
		// would mean no timeout at all for OTLP/HTTP.
		if ms, err := strconv.Atoi(timeout); err != nil || ms <= 0 {
			return fmt.Errorf("%s must be a whole number of milliseconds above 0 (10000 is 10 s), got %q", timeoutVar, timeout)
		}
	}
	return nil
}

// checkOTLPEndpoint reports an endpoint the OTLP exporter would not send
// to. OTLP/HTTP needs a URL with scheme http or https and a host; OTLP/gRPC
// takes any URL (collector:4317 is a gRPC target) but, like OTLP/HTTP,
// ignores one net/url cannot parse, such as a host:port whose host is an
// IP address.
func checkOTLPEndpoint(endpoint string, grpc bool) error {
	hint := ""
	if host, port, err := net.SplitHostPort(endpoint); err == nil && host != "" && port != "" && !strings.Contains(endpoint, "/") {
		hint = " (did you mean http://" + endpoint + "?)"
	}
	u, err := url.Parse(endpoint)
	if err != nil && grpc {
		return fmt.Errorf("must be a URL (http://collector:4317), got %q%s", endpoint, hint)
	}
	web := err == nil && (strings.EqualFold(u.Scheme, "http") || strings.EqualFold(u.Scheme, "https"))
	switch {
	case !web && !grpc:
		return fmt.Errorf("must be a URL with scheme http or https and a host (http://collector:4318), got %q%s", endpoint, hint)
	case web && u.Host == "":
		return fmt.Errorf("must name a host (http://collector:4318), got %q", endpoint)
	}
	return nil
}

// ExporterName is the exporter o selects.
func (o TracingOptions) ExporterName() string {
	switch {
	case o.Exporter != "":
		return o.Exporter
	case o.OTLPEndpoint != "":
		return ExporterOTLP
	}
	return ExporterNone
}

// Validate reports settings NewTracerProvider would refuse.
func (o TracingOptions) Validate() error {
	switch o.ExporterName() {
	case ExporterOTLP, ExporterConsole, ExporterNone:
	default:
		return fmt.Errorf("OTEL_TRACES_EXPORTER must be otlp, console or none, got %q", o.Exporter)
	}
	if o.ExporterName() == ExporterOTLP {
		if err := o.OTLP.Validate(); err != nil {
			return err
		}
	}
	_, err := Sampler(o.Sampler, o.SamplerArg)
	return err
}

// NewTracerProvider returns a tracer provider exporting as o says, with a
// resource naming the service and its version. Spans are created even with
// the none exporter (unrecorded unless a sampler is set), so log lines
// still carry trace and span ids. The
// caller must Shutdown the provider on exit, which flushes queued spans.
func NewTracerProvider(ctx context.Context, o TracingOptions) (*sdktrace.TracerProvider, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	sampler, _ := Sampler(o.Sampler, o.SamplerArg)
	if o.ExporterName() == ExporterNone && o.Sampler == "" && len(o.SpanProcessors) == 0 {
		// Nothing would receive recorded spans: record none of the
		// service's own. Spans still carry trace and span ids (an incoming
		// traceparent's trace id), so log lines and outgoing calls stay
		// correlated. A client's sampled traceparent is honoured (its
		// spans are recorded and dropped) so that the hosts tools call
		// still get the sampled flag the client set: a hop that exports
		// nothing must not turn the trace off for those after it.
		sampler = sdktrace.ParentBased(sdktrace.NeverSample())
	}
	name := o.ServiceName
	if name == "" {
		name = "toolsvc"
	}
	// Later options override earlier ones: the explicit service name and
	// version win over OTEL_RESOURCE_ATTRIBUTES.
	res, err := resource.New(ctx,
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(semconv.ServiceName(name), semconv.ServiceVersion(o.ServiceVersion)),
	)
	if err != nil {
		return nil, fmt.Errorf("tracing resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithSampler(sampler)}
	switch o.ExporterName() {
	case ExporterConsole:
		w := o.Console
		if w == nil {
			w = io.Discard
		}
		exp, err := stdouttrace.New(stdouttrace.WithWriter(w))
		if err != nil {
			return nil, fmt.Errorf("console span exporter: %w", err)
		}
		// Synchronous, so a span is printed as soon as it ends; o.Console
		// must not block (see TracingOptions.Console).
		opts = append(opts, sdktrace.WithSyncer(exp))
	case ExporterOTLP:
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("otlp span exporter: %w", err)
		}
		if !autoexport.IsNoneSpanExporter(exp) {
			opts = append(opts, sdktrace.WithBatcher(exp))
		}
	}
	for _, p := range o.SpanProcessors {
		opts = append(opts, sdktrace.WithSpanProcessor(p))
	}
	return sdktrace.NewTracerProvider(opts...), nil
}

// Sampler returns the sampler named as OTEL_TRACES_SAMPLER names it
// (always_on, always_off, traceidratio, parentbased_always_on,
// parentbased_always_off, parentbased_traceidratio), with arg as
// OTEL_TRACES_SAMPLER_ARG (the ratio, 0 to 1, default 1). Empty is
// parentbased_always_on, the OpenTelemetry default, so an incoming
// traceparent decides whether a request is sampled.
func Sampler(name, arg string) (sdktrace.Sampler, error) {
	ratio := 1.0
	if arg != "" && (name == "traceidratio" || name == "parentbased_traceidratio") {
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG must be a ratio from 0 to 1, got %q", arg)
		}
		ratio = r
	}
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), nil
	}
	return nil, fmt.Errorf("OTEL_TRACES_SAMPLER must be always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio, got %q", name)
}

// Propagator is the W3C trace context propagator of the requests tools
// make (http__get, http__post): it writes traceparent (the call's trace
// id, span id and sampled flag) and never the client's tracestate, nor
// baggage, so that nothing a client sends is forwarded to the hosts tools
// call. tracestate is vendor data of the client's (W3C Trace Context,
// section 3.3) and may carry anything; the service adds none of its own.
func Propagator() propagation.TextMapPropagator { return traceParentOnly{} }

// traceParentOnly is the W3C trace context propagator less tracestate.
type traceParentOnly struct{ propagation.TraceContext }

// Inject writes the traceparent of the span in ctx, without its
// tracestate.
func (p traceParentOnly) Inject(ctx context.Context, carrier propagation.TextMapCarrier) {
	sc := trace.SpanContextFromContext(ctx)
	if sc.TraceState().Len() > 0 {
		ctx = trace.ContextWithSpanContext(ctx, sc.WithTraceState(trace.TraceState{}))
	}
	p.TraceContext.Inject(ctx, carrier)
}

// Fields are the headers Inject writes.
func (traceParentOnly) Fields() []string { return []string{"traceparent"} }
