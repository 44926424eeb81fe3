package deploy

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.yaml.in/yaml/v3"

	"github.com/toolsvc/toolsvc/api"
	toolhttp "github.com/toolsvc/toolsvc/internal/http"
	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/telemetry"
	"github.com/toolsvc/toolsvc/internal/tools/jsonq"
	"github.com/toolsvc/toolsvc/internal/tools/text"
)

// serviceMetrics builds the HTTP server as the service does, makes calls
// that succeed, fail and are truncated, scrapes /metrics and returns every
// series name it exposes (histograms as _bucket, _sum and _count).
func serviceMetrics(t *testing.T) map[string]bool {
	t.Helper()
	metrics := telemetry.NewRegistry("test")
	reg, err := registry.New(registry.Defaults{Timeout: 5 * time.Second, MaxOutputBytes: 256, ErrorMessageLimit: 1000},
		append(text.Tools(), jsonq.Tools()...)...)
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(t.Context())
	exec := registry.NewExecutor(registry.Options{Registry: reg, Metrics: registry.NewMetrics(metrics), Tracer: tp.Tracer("toolsvc")})
	srv := httptest.NewServer(toolhttp.NewServer(toolhttp.Deps{
		Executor: exec, Gatherer: metrics, Registerer: metrics, TracerProvider: tp, OpenAPI: api.OpenAPI(),
	}))
	defer srv.Close()
	for _, body := range []string{
		`{"toolName":"text__transform","arguments":{"operation":"upper","text":"hi"}}`,
		`{"toolName":"text__transform","arguments":{"operation":"upper","text":"` + strings.Repeat("x", 1000) + `"}}`,
		`{"toolName":"text__transform","arguments":{"operation":"upper","text":5}}`,
		`{"toolName":"no__such","arguments":{}}`,
	} {
		resp, err := http.Post(srv.URL+"/calls", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for name, f := range families {
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[name], names[name+"_sum"], names[name+"_count"] = true, true, true
		default:
			names[name] = true
		}
	}
	return names
}

// grafanaVariable matches $name, ${name} and ${name:format}.
var grafanaVariable = regexp.MustCompile(`\$\{?(\w+)(?::\w+)?\}?`)

// promQL parses expr after putting values in for the dashboard's variables
// and returns the metric names it selects.
func promQL(expr string) ([]string, error) {
	expr = grafanaVariable.ReplaceAllStringFunc(expr, func(v string) string {
		name := grafanaVariable.FindStringSubmatch(v)[1]
		switch name {
		case "__rate_interval", "__interval", "__range":
			return "5m"
		}
		return ".*" // a template variable, always inside a regex matcher here
	})
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel {
					name = m.Value
				}
			}
			names = append(names, name)
		}
		return nil
	})
	return names, nil
}

// prometheusMetrics are series Prometheus makes itself, not the service.
var prometheusMetrics = []string{"up"}

type dashboard struct {
	UID           string
	Title         string
	SchemaVersion int
	Templating    struct {
		List []struct {
			Name, Type string
		}
	}
	Panels []struct {
		ID         int
		Type       string
		Title      string
		Datasource *struct{ Type, UID string }
		GridPos    struct{ H, W, X, Y int }
		Targets    []struct {
			RefID string
			Expr  string
		}
	}
}

func TestDashboard(t *testing.T) {
	exposed := serviceMetrics(t)
	b, err := os.ReadFile("grafana/toolsvc.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("toolsvc.json: %v", err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 30 || len(d.Panels) == 0 {
		t.Fatalf("dashboard header: uid %q title %q schemaVersion %d", d.UID, d.Title, d.SchemaVersion)
	}
	variables := map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}
	for _, v := range d.Templating.List {
		variables[v.Name] = true
	}
	ids := map[int]bool{}
	titles := map[string]bool{}
	queried := map[string]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		titles[p.Title] = true
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || len(p.Targets) == 0 {
			t.Errorf("panel %q has no Prometheus queries", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: refId %q", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			for _, m := range grafanaVariable.FindAllStringSubmatch(tg.Expr, -1) {
				if !variables[m[1]] {
					t.Errorf("panel %q uses undefined variable $%s", p.Title, m[1])
				}
			}
			names, err := promQL(tg.Expr)
			if err != nil {
				t.Errorf("panel %q: %s: %v", p.Title, tg.Expr, err)
			}
			for _, n := range names {
				queried[n] = true
				if !exposed[n] && !slices.Contains(prometheusMetrics, n) {
					t.Errorf("panel %q queries %s, which the service does not expose", p.Title, n)
				}
			}
		}
	}
	for _, want := range []string{"Calls/s by tool", "Errors/s by code", "Latency by tool (p50, p95, p99)", "In flight by tool",
		"Truncations/s by tool", "Policy decisions/s", "Pending approvals"} {
		if !titles[want] {
			t.Errorf("no panel %q", want)
		}
	}
	// Every metric of SPEC §10 is on the dashboard.
	for _, m := range specMetrics() {
		if !queried[m] {
			t.Errorf("the dashboard shows nothing of %s", m)
		}
	}
}

// specMetrics are the metrics SPEC §10 names (histograms by their buckets).
func specMetrics() []string {
	return []string{"toolsvc_tool_calls_total", "toolsvc_tool_call_duration_seconds_bucket", "toolsvc_tool_calls_in_flight",
		"toolsvc_tool_output_truncated_total", "toolsvc_policy_decisions_total", "toolsvc_approvals_pending",
		"toolsvc_http_requests_total", "toolsvc_http_request_duration_seconds_bucket"}
}

func TestServiceExposesSpecMetrics(t *testing.T) {
	exposed := serviceMetrics(t)
	for _, m := range append(specMetrics(), "go_goroutines", "process_resident_memory_bytes") {
		if !exposed[m] {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []struct {
			Alert         string            `yaml:"alert"`
			Record        string            `yaml:"record"`
			Expr          string            `yaml:"expr"`
			For           string            `yaml:"for"`
			KeepFiringFor string            `yaml:"keep_firing_for"`
			Labels        map[string]string `yaml:"labels"`
			Annotations   map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func TestAlertRules(t *testing.T) {
	exposed := serviceMetrics(t)
	f, err := os.Open("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rules ruleFile
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	if err := dec.Decode(&rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	queried := map[string]bool{}
	for _, g := range rules.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q is empty", g.Name)
		}
		for _, r := range g.Rules {
			if r.Alert == "" || r.Record != "" {
				t.Errorf("rule %q: want an alerting rule", r.Alert+r.Record)
				continue
			}
			if seen[r.Alert] || !regexp.MustCompile(`^Toolsvc[A-Z][A-Za-z0-9]+$`).MatchString(r.Alert) {
				t.Errorf("alert name %q: duplicate or not ToolsvcCamelCase", r.Alert)
			}
			seen[r.Alert] = true
			names, err := promQL(r.Expr)
			if err != nil {
				t.Errorf("%s: expr does not parse: %v", r.Alert, err)
			}
			for _, n := range names {
				queried[n] = true
				if !exposed[n] && !slices.Contains(prometheusMetrics, n) {
					t.Errorf("%s queries %s, which the service does not expose", r.Alert, n)
				}
			}
			for _, d := range []string{r.For, r.KeepFiringFor} {
				if d != "" {
					if _, err := model.ParseDuration(d); err != nil {
						t.Errorf("%s: duration %q: %v", r.Alert, d, err)
					}
				}
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
				t.Errorf("%s: severity %q", r.Alert, s)
			}
			for _, k := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[k] == "" {
					t.Errorf("%s: no %s annotation", r.Alert, k)
				}
			}
			for k, v := range r.Annotations {
				if err := checkTemplate(v); err != nil {
					t.Errorf("%s: annotation %s: %v", r.Alert, k, err)
				}
			}
			anchor := "#" + strings.ToLower(r.Alert)
			if !strings.HasSuffix(r.Annotations["runbook_url"], "deploy/README.md"+anchor) ||
				!strings.Contains(string(readme), "### "+r.Alert+"\n") {
				t.Errorf("%s: runbook_url %q must point at a '### %s' section of deploy/README.md", r.Alert, r.Annotations["runbook_url"], r.Alert)
			}
		}
	}
	for _, want := range []string{"toolsvc_tool_calls_total", "toolsvc_tool_call_duration_seconds_bucket", "toolsvc_approvals_pending"} {
		if !queried[want] {
			t.Errorf("no alert on %s (errors, latency, approvals)", want)
		}
	}
}

// checkTemplate parses an annotation as Prometheus does: text/template
// with $labels and $value defined and Prometheus's functions.
func checkTemplate(s string) error {
	funcs := template.FuncMap{}
	for _, name := range []string{"humanize", "humanize1024", "humanizeDuration", "humanizePercentage", "humanizeTimestamp", "title", "toUpper", "toLower", "reReplaceAll", "match", "args", "first", "label", "value", "query", "sortByLabel", "strvalue", "safeHtml", "externalURL", "pathPrefix", "tableLink", "graphLink", "stripPort", "stripDomain", "parseDuration", "toTime", "toDuration", "now"} {
		funcs[name] = func(...any) any { return nil }
	}
	_, err := template.New("").Funcs(funcs).Parse("{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$value := .Value}}" + s)
	return err
}

// TestComposeStack checks the local stack's wiring: the services the
// README promises, images pinned by tag, and every file it mounts present.
func TestComposeStack(t *testing.T) {
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Build       map[string]any    `yaml:"build"`
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
			Ports       []string          `yaml:"ports"`
			Init        bool              `yaml:"init"`
		} `yaml:"services"`
		Volumes map[string]any `yaml:"volumes"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	for _, want := range []string{"toolsvc", "postgres", "otel-collector", "prometheus", "grafana", "jaeger"} {
		if _, ok := c.Services[want]; !ok {
			t.Errorf("no service %s", want)
		}
	}
	known := knownVariables(t)
	for name, s := range c.Services {
		if s.Build == nil {
			if i := strings.LastIndex(s.Image, ":"); i < 0 || strings.HasSuffix(s.Image, ":latest") {
				t.Errorf("%s: image %q is not pinned by tag", name, s.Image)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(filepath.FromSlash(src)); err != nil {
					t.Errorf("%s mounts %s: %v", name, src, err)
				}
			} else if _, ok := c.Volumes[src]; !ok {
				t.Errorf("%s: volume %s is not declared", name, src)
			}
		}
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s publishes %s beyond loopback", name, p)
			}
		}
		if name == "toolsvc" {
			// toolsvc as PID 1 reaps only its own children.
			if !s.Init {
				t.Error("toolsvc runs without init: true, so nothing reaps the orphans of tools' programs")
			}
			for k := range s.Environment {
				if !known[k] {
					t.Errorf("toolsvc env %s is not a variable toolsvc reads", k)
				}
			}
		}
	}
	// The collector config, Prometheus config and Grafana provisioning
	// parse as YAML and point at one another.
	for _, f := range []string{"otel-collector/config.yaml", "prometheus/prometheus.yml", "grafana/provisioning/datasources/datasources.yaml", "grafana/provisioning/dashboards/dashboards.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := yaml.Unmarshal(b, &v); err != nil || len(v) == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	prom, _ := os.ReadFile("prometheus/prometheus.yml")
	if !strings.Contains(string(prom), "toolsvc:8080") || !strings.Contains(string(prom), "/etc/prometheus/alerts.yaml") {
		t.Error("prometheus.yml does not scrape toolsvc or load the alerts")
	}
}

// TestQueryCheckHasTeeth shows a misspelt metric in a query is caught.
func TestQueryCheckHasTeeth(t *testing.T) {
	names, err := promQL(`sum by (tool) (rate(toolsvc_tool_call_total{job=~"$job",tool=~"${tool}"}[$__rate_interval])) / on() group_left {__name__="up"}`)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{"toolsvc_tool_call_total", "up"}) {
		t.Errorf("names %v", names)
	}
	if serviceMetrics(t)["toolsvc_tool_call_total"] {
		t.Error("a misspelt metric name counts as exposed")
	}
	if _, err := promQL(`sum(rate(toolsvc_tool_calls_total[5m])`); err == nil {
		t.Error("an unbalanced query parsed")
	}
}
