package registry

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/trace"
)

// UnknownTool is the metric label of a tool name that is not registered,
// so invented names cannot grow the number of series.
const UnknownTool = "unknown"

// Metrics are the executor's Prometheus instruments.
type Metrics struct {
	calls     *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	inFlight  *prometheus.GaugeVec
	truncated *prometheus.CounterVec
	decisions *prometheus.CounterVec
	approvals prometheus.Gauge
	// abandonedTotal counts handlers that did not return by their
	// deadline; abandoned is those of them still running.
	abandonedTotal *prometheus.CounterVec
	abandoned      *prometheus.GaugeVec
	backlog        prometheus.Gauge
}

// toolSeries are one tool's series for the common case (allowed, in
// flight, ok), looked up once per tool instead of on every call. The
// in-flight and truncation series exist from load, at zero, as before;
// the others are created by the first call that touches them, so that a
// catalog of thousands of tools does not expose series (a histogram is 19)
// that no call has touched.
type toolSeries struct {
	inFlight   prometheus.Gauge
	truncated  prometheus.Counter
	allowed    lazy[prometheus.Counter]
	ok         lazy[prometheus.Counter]
	okDuration lazy[prometheus.Observer]
}

// forget deletes the series of a tool no longer served, unless calls of
// it are still running or abandoned (their gauges are not zero yet).
func (m *Metrics) forget(tool string) {
	busy := func(g *prometheus.GaugeVec) bool {
		var out dto.Metric
		return g.WithLabelValues(tool).Write(&out) == nil && out.GetGauge().GetValue() != 0
	}
	if busy(m.inFlight) || busy(m.abandoned) {
		return
	}
	labels := prometheus.Labels{"tool": tool}
	m.calls.DeletePartialMatch(labels)
	m.duration.DeletePartialMatch(labels)
	m.inFlight.DeletePartialMatch(labels)
	m.truncated.DeletePartialMatch(labels)
	m.decisions.DeletePartialMatch(labels)
	m.abandonedTotal.DeletePartialMatch(labels)
	m.abandoned.DeletePartialMatch(labels)
}

func (m *Metrics) seriesOf(t *Tool) *toolSeries {
	name := t.Name
	return &toolSeries{
		inFlight:   m.inFlight.WithLabelValues(name),
		truncated:  m.truncated.WithLabelValues(name),
		allowed:    lazy[prometheus.Counter]{new: func() prometheus.Counter { return m.decisions.WithLabelValues(name, string(Allow)) }},
		ok:         lazy[prometheus.Counter]{new: func() prometheus.Counter { return m.calls.WithLabelValues(name, string(t.Tier), string(StatusOK), "") }},
		okDuration: lazy[prometheus.Observer]{new: func() prometheus.Observer { return m.duration.WithLabelValues(name, string(StatusOK)) }},
	}
}

// lazy is a value made by new on first use.
type lazy[T any] struct {
	once sync.Once
	v    T
	new  func() T
}

func (l *lazy[T]) get() T {
	l.once.Do(func() { l.v = l.new() })
	return l.v
}

// DurationBuckets suit tool calls from 1 ms to 300 s.
func DurationBuckets() []float64 {
	return []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
}

// NewMetrics registers the executor's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	return &Metrics{
		calls: f.NewCounterVec(prometheus.CounterOpts{
			Name: "toolsvc_tool_calls_total",
			Help: "Tool calls by tool, tier, status and error code.",
		}, []string{"tool", "tier", "status", "code"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "toolsvc_tool_call_duration_seconds",
			Help:    "Duration of tool calls, from receipt to result.",
			Buckets: DurationBuckets(),
		}, []string{"tool", "status"}),
		inFlight: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "toolsvc_tool_calls_in_flight",
			Help: "Tool calls running now.",
		}, []string{"tool"}),
		truncated: f.NewCounterVec(prometheus.CounterOpts{
			Name: "toolsvc_tool_output_truncated_total",
			Help: "Tool outputs cut to the tool's maxOutputBytes.",
		}, []string{"tool"}),
		decisions: f.NewCounterVec(prometheus.CounterOpts{
			Name: "toolsvc_policy_decisions_total",
			Help: "Policy decisions by tool and effect.",
		}, []string{"tool", "decision"}),
		approvals: f.NewGauge(prometheus.GaugeOpts{
			Name: "toolsvc_approvals_pending",
			Help: "Calls waiting for a human decision.",
		}),
		abandonedTotal: f.NewCounterVec(prometheus.CounterOpts{
			Name: "toolsvc_tool_calls_abandoned_total",
			Help: "Tool handlers that had not returned a second after their deadline; each keeps its concurrency slot until it returns.",
		}, []string{"tool"}),
		abandoned: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "toolsvc_tool_calls_abandoned",
			Help: "Abandoned tool handlers still running (holding their concurrency slots).",
		}, []string{"tool"}),
		backlog: f.NewGauge(prometheus.GaugeOpts{
			Name: "toolsvc_store_backlog",
			Help: "Results and audit entries the store did not take, held in memory and retried.",
		}),
	}
}

func (m *Metrics) setBacklog(n int) {
	if m != nil {
		m.backlog.Set(float64(n))
	}
}

// SetApprovalsPending sets the number of calls waiting for a human
// decision; the approval queue calls it whenever the number changes.
func (m *Metrics) SetApprovalsPending(n int) {
	if m != nil {
		m.approvals.Set(float64(n))
	}
}

// ObserveWithTrace records v, with the trace id as an exemplar when the
// span is sampled, so a latency outlier on a dashboard links to its trace.
// Exemplars are exposed only to scrapes that ask for OpenMetrics.
func ObserveWithTrace(o prometheus.Observer, sc trace.SpanContext, v float64) {
	if eo, ok := o.(prometheus.ExemplarObserver); ok && sc.IsSampled() {
		eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String()})
		return
	}
	o.Observe(v)
}

// AbandonedTotal returns the counter of abandoned handlers of tool.
func (m *Metrics) AbandonedTotal(tool string) prometheus.Counter {
	return m.abandonedTotal.WithLabelValues(tool)
}

// Abandoned returns the gauge of abandoned handlers of tool still running.
func (m *Metrics) Abandoned(tool string) prometheus.Gauge {
	return m.abandoned.WithLabelValues(tool)
}
