package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/logtest"
)

// TestConsoleSpansNeverBlockCalls serves with the console exporter and a
// stdout nobody reads (a pipe whose reader never reads: every write to it
// blocks). Calls, the catalog and the stop must not wait for it: the
// spans go to stdout through a writer that holds or drops them.
func TestConsoleSpansNeverBlockCalls(t *testing.T) {
	addr := freeAddr(t)
	stalled, stdout := io.Pipe()
	stderr := &logtest.Buffer{}
	environ := []string{"TOOLSVC_ADDR=" + addr, "TOOLSVC_LOG_FLUSH_INTERVAL=0", "TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_DATA_DIR=" + t.TempDir(),
		"OTEL_TRACES_EXPORTER=console", "TOOLSVC_SHUTDOWN_TIMEOUT=1s"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"toolsvc"}, environ, stdout, stderr) }()
	stopped := false
	defer func() {
		cancel()
		if !stopped {
			// Unblock a stdout write the old code would be stuck in, so
			// that a failure ends this test rather than leaking run.
			stalled.Close()
			<-done
		}
	}()
	client := &http.Client{Timeout: 5 * time.Second}
	base := "http://" + addr
	for i := 0; ; i++ {
		if resp, err := client.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if i > 500 {
			t.Fatalf("not healthy:\n%s", stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := range 5 {
		resp, err := client.Post(base+"/calls", "application/json", strings.NewReader(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"a"}}`))
		if err != nil {
			t.Fatalf("call %d with stdout stalled: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d: %s", i, resp.Status)
		}
	}
	for _, path := range []string{"/tools", "/metrics"} {
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s with stdout stalled: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if path == "/metrics" && !strings.Contains(string(b), `toolsvc_console_spans_dropped_total{reason="full"}`) {
			t.Errorf("no toolsvc_console_spans_dropped_total in /metrics")
		}
	}
	// The stop ends although stdout never takes the spans it holds.
	cancel()
	select {
	case err := <-done:
		stopped = true
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("run did not return after the stop with stdout stalled:\n%s", stderr)
	}
	stalled.Close()
	if !strings.Contains(stderr.String(), `"msg":"stopped"`) {
		t.Errorf("no stopped line:\n%s", stderr)
	}
}

// TestSpanFlushBoundedByShutdownTimeout checks that the flush of the spans
// at the stop ends by TOOLSVC_SHUTDOWN_TIMEOUT after the stop began (the
// drain's end), not 5 s after the drain, the records' last attempt and the
// HTTP shutdown.
func TestSpanFlushBoundedByShutdownTimeout(t *testing.T) {
	cfg, err := loadConfig([]string{"TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_SHUTDOWN_TIMEOUT=3s", "OTEL_TRACES_EXPORTER=none"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	o, err := newObservability(ctx, cfg, io.Discard, log)
	if err != nil {
		t.Fatal(err)
	}
	cancel() // SIGTERM
	for i := 0; o.stopping.Load() == 0; i++ {
		if i > 1000 {
			t.Fatal("the stop was not noticed")
		}
		time.Sleep(time.Millisecond)
	}
	var deadline time.Time
	shutdown := o.shutdown
	o.shutdown = func(ctx context.Context) error {
		deadline, _ = ctx.Deadline()
		return shutdown(ctx)
	}
	o.close(log)
	if want := time.Unix(0, o.stopping.Load()).Add(3 * time.Second); !deadline.Equal(want) {
		t.Errorf("the span flush ends at %s, %s after the stop's deadline", deadline.Format(time.RFC3339Nano), deadline.Sub(want))
	}
}

func TestSpanFlushDeadline(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		left, want time.Duration // of the stop's time, and for the flush
	}{
		{2 * time.Second, 2 * time.Second},
		{30 * time.Second, 5 * time.Second}, // at most 5 s
		{300 * time.Millisecond, time.Second},
		{-10 * time.Second, time.Second}, // the drain took it all: 1 s still
	} {
		if got := spanFlushDeadline(now, now.Add(tc.left)).Sub(now); got != tc.want {
			t.Errorf("%s left: flush for %s, want %s", tc.left, got, tc.want)
		}
	}
}

// TestOTLPSettingsChecked refuses to start (and toolsvc validate refuses)
// with an OTLP setting the exporter would ignore, falling back to its
// default (spans sent to localhost:4318) with a line on stderr only.
func TestOTLPSettingsChecked(t *testing.T) {
	ws := "TOOLSVC_WORKSPACE=" + t.TempDir()
	for _, tc := range []struct {
		env  string
		want string // in the error; empty: accepted
	}{
		{"OTEL_EXPORTER_OTLP_ENDPOINT=127.0.0.1:19258", "OTEL_EXPORTER_OTLP_ENDPOINT must be a URL with scheme http or https and a host (http://collector:4318), got \"127.0.0.1:19258\" (did you mean http://127.0.0.1:19258?)"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT=::not_a_url", "OTEL_EXPORTER_OTLP_ENDPOINT must be a URL"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=collector:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT must be a URL with scheme http or https"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_EXPORTER_OTLP_TIMEOUT=junk", "OTEL_EXPORTER_OTLP_TIMEOUT must be a whole number of milliseconds"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_EXPORTER_OTLP_PROTOCOL=http/json", "OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf or grpc"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT=127.0.0.1:4317 OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_EXPORTER_OTLP_ENDPOINT must be a URL (http://collector:4317)"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_EXPORTER_OTLP_TIMEOUT=2500", ""},
		{"OTEL_EXPORTER_OTLP_ENDPOINT=collector:4317 OTEL_EXPORTER_OTLP_PROTOCOL=grpc", ""},
		{"OTEL_TRACES_EXPORTER=console OTEL_EXPORTER_OTLP_ENDPOINT=127.0.0.1:4318", ""}, // not the exporter in use
	} {
		err := run(context.Background(), []string{"toolsvc", "validate"}, append(strings.Fields(tc.env), ws), io.Discard, io.Discard)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.env, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want %q", tc.env, err, tc.want)
		}
	}
	// Serving refuses before it listens (the timeout only ends a service
	// that started).
	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := run(ctx, []string{"toolsvc"}, []string{ws, "TOOLSVC_ADDR=" + addr, "TOOLSVC_DATA_DIR=" + t.TempDir(), "OTEL_EXPORTER_OTLP_ENDPOINT=127.0.0.1:19258"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_ENDPOINT") {
		t.Errorf("serve with OTEL_EXPORTER_OTLP_ENDPOINT=127.0.0.1:19258: %v", err)
	}
}

// TestOpenTelemetryLogsToServiceLog has the OTLP exporter report a
// setting it cannot read (a header without "="): the line reaches the
// service's JSON log, not the process's stderr as plain text. The
// exporter reads the process environment, so the test sets it there.
func TestOpenTelemetryLogsToServiceLog(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "no-equals-sign")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "")
	cfg, err := loadConfig([]string{"TOOLSVC_WORKSPACE=" + t.TempDir(), "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9"})
	if err != nil {
		t.Fatal(err)
	}
	var out logtest.Buffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	o, err := newObservability(context.Background(), cfg, io.Discard, log)
	if err != nil {
		t.Fatal(err)
	}
	o.close(log)
	if !strings.Contains(out.String(), `"logger":"opentelemetry"`) || !strings.Contains(out.String(), `"msg":"parse headers"`) {
		t.Errorf("OpenTelemetry's line is not in the service's log:\n%s", out.String())
	}
}

// TestUnexportedSignalsWarned warns once, at the start, that
// OTEL_METRICS_EXPORTER and OTEL_LOGS_EXPORTER do nothing.
func TestUnexportedSignalsWarned(t *testing.T) {
	for _, tc := range []struct {
		env   []string
		warns bool
	}{
		{[]string{"OTEL_METRICS_EXPORTER=otlp", "OTEL_LOGS_EXPORTER=otlp"}, true},
		{[]string{"OTEL_LOGS_EXPORTER=console"}, true},
		{[]string{"OTEL_METRICS_EXPORTER=none"}, false},
		{nil, false},
	} {
		cfg, err := loadConfig(append(tc.env, "TOOLSVC_WORKSPACE="+t.TempDir()))
		if err != nil {
			t.Fatal(err)
		}
		var out logtest.Buffer
		log := slog.New(slog.NewJSONHandler(&out, nil))
		o, err := newObservability(context.Background(), cfg, io.Discard, log)
		if err != nil {
			t.Fatal(err)
		}
		o.close(log)
		n := strings.Count(out.String(), "only traces are exported over OpenTelemetry")
		if tc.warns && (n != 1 || !strings.Contains(out.String(), "/metrics") || !strings.Contains(out.String(), strings.SplitN(tc.env[0], "=", 2)[0])) || !tc.warns && n != 0 {
			t.Errorf("%v: %d warnings:\n%s", tc.env, n, out.String())
		}
	}
}
