package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

// With TOOLSVC_MAX_CONCURRENCY=1 a plan holds the only slot, so none of
// its steps could ever run, and the model would be told to retry forever:
// the configuration is refused, naming both settings.
func TestPlanToolNeedsTwoSlots(t *testing.T) {
	ws := "TOOLSVC_WORKSPACE=" + t.TempDir()
	err := run(context.Background(), []string{"toolsvc", "validate"}, []string{ws, "TOOLSVC_PLAN_TOOL=true", "TOOLSVC_MAX_CONCURRENCY=1"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "TOOLSVC_PLAN_TOOL=true needs TOOLSVC_MAX_CONCURRENCY of at least 2") {
		t.Errorf("plan tool with one slot: %v", err)
	}
	for _, env := range [][]string{{"TOOLSVC_MAX_CONCURRENCY=1"}, {"TOOLSVC_PLAN_TOOL=true", "TOOLSVC_MAX_CONCURRENCY=2"}} {
		if err := run(context.Background(), []string{"toolsvc", "validate"}, append([]string{ws}, env...), io.Discard, io.Discard); err != nil {
			t.Errorf("%v: %v", env, err)
		}
	}
}
