package registry_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// toolsInSeries lists, per tool label value, how many series g has.
func toolsInSeries(t *testing.T, g prometheus.Gatherer) map[string]int {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tool" {
					out[l.GetValue()]++
				}
			}
		}
	}
	return out
}

// TestReloadForgetsSeriesOfRemovedTools: a tool a reload removes takes its
// metric series with it, unless a call of it still runs, so a catalog
// whose names keep changing does not grow /metrics without end.
func TestReloadForgetsSeriesOfRemovedTools(t *testing.T) {
	release := make(chan struct{})
	mk := func(name string, block bool) *registry.Tool {
		return &registry.Tool{
			Definition: registry.Definition{Name: name, Description: "A tool.", Tier: registry.ReadOnly, Parameters: object},
			Handler: registry.Func(func(context.Context, *registry.Request) (any, error) {
				if block {
					<-release
				}
				return "ok", nil
			}),
		}
	}
	prom := prometheus.NewRegistry()
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, mk("gen__old", false), mk("gen__busy", true), mk("gen__kept", false)),
		Metrics: registry.NewMetrics(prom)})
	call := func(name string) {
		if res, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolName: name, Arguments: json.RawMessage(`{}`)}); err != nil || res.Status != registry.StatusOK {
			t.Errorf("%s: %v %+v", name, err, res)
		}
	}
	call("gen__old")
	call("gen__kept")
	done := make(chan struct{})
	go func() { defer close(done); call("gen__busy") }()
	for toolsInSeries(t, prom)["gen__busy"] == 0 || !busy(t, prom, "gen__busy") {
		select {
		case <-done:
			t.Fatal("the blocking call returned")
		case <-time.After(time.Millisecond):
		}
	}
	e.Load(newRegistry(t, mk("gen__kept", false), mk("gen__new", false)), nil)
	got := toolsInSeries(t, prom)
	if got["gen__old"] != 0 || got["gen__kept"] == 0 || got["gen__new"] == 0 || got["gen__busy"] == 0 {
		t.Errorf("series by tool after the reload: %v; want none of gen__old, and gen__busy's kept while its call runs", got)
	}
	close(release)
	<-done
}

// busy reports whether tool has a call in flight by the gauge.
func busy(t *testing.T, g prometheus.Gatherer, tool string) bool {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if !strings.HasSuffix(f.GetName(), "in_flight") {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tool" && l.GetValue() == tool && m.GetGauge().GetValue() > 0 {
					return true
				}
			}
		}
	}
	return false
}
