package mcpbridge

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolsvc/toolsvc/internal/logtest"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestLongDescriptionsAreCut: a server chooses its tools' descriptions,
// and only the 16 MiB bound on a listing bounded them: a description of
// 4 MiB went whole into every catalog and every prompt. Each is cut at
// the server's maxDescriptionBytes (8 KiB by default) on a character
// boundary, with a marker; titles too. One warning per listing names the
// server and how many were cut, without the texts.
func TestLongDescriptionsAreCut(t *testing.T) {
	huge := "Looks things up. " + strings.Repeat("€", 4<<20/3) // 4 MiB, three bytes a character
	u := listingServer(t, []map[string]any{
		{"name": "echo", "description": "Echo a message.", "inputSchema": object()},
		{"name": "huge", "description": huge, "inputSchema": object(), "annotations": map[string]any{"title": huge}},
		{"name": "big", "description": strings.Repeat("b", 9<<10), "inputSchema": object()},
	})
	for _, tc := range []struct {
		extra string
		limit int
	}{
		{"", DefaultMaxDescriptionBytes},
		{"  maxDescriptionBytes: 100\n", 100},
	} {
		var logs logtest.Buffer
		f := newFixture(t, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
		f.env["MCP_TOKEN"] = "Bearer x"
		set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("s", u) + tc.extra)})
		byName := map[string]*registry.Tool{}
		for _, tl := range f.m.Tools(set) {
			byName[tl.Name] = tl
		}
		if d := byName["s__echo"].Description; d != "Echo a message." {
			t.Errorf("limit %d: a short description changed: %q", tc.limit, d)
		}
		for _, text := range []string{byName["s__huge"].Description, byName["s__huge"].Annotations.Title, byName["s__big"].Description} {
			body, marker, ok := strings.Cut(text, "… [description truncated: ")
			if !ok || len(body) > tc.limit || len(body) < tc.limit-3 || !utf8.ValidString(text) || !strings.HasSuffix(marker, " bytes total]") {
				t.Errorf("limit %d: %d bytes, valid UTF-8 %v, ends %q", tc.limit, len(text), utf8.ValidString(text), text[max(0, len(text)-60):])
			}
		}
		if !strings.HasSuffix(byName["s__huge"].Description, "[description truncated: 4194320 bytes total]") {
			t.Errorf("limit %d: the marker does not give the length: %q", tc.limit, byName["s__huge"].Description[len(byName["s__huge"].Description)-60:])
		}
		if tc.limit == DefaultMaxDescriptionBytes && !strings.HasPrefix(byName["s__big"].Description, strings.Repeat("b", 8<<10)+"…") {
			t.Errorf("the description of 9 KiB is not cut at 8 KiB")
		}
		_ = f.executor(set) // the registry takes the tools

		// A rebuild of the registry, for another server's change, does not
		// log the same listing's cuts again.
		f.m.Tools(set)
		var warnings []map[string]any
		for _, line := range strings.Split(logs.String(), "\n") {
			var l map[string]any
			if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == "mcp: tool descriptions cut" {
				warnings = append(warnings, l)
			}
		}
		if len(warnings) != 1 || warnings[0]["server"] != "s" || warnings[0]["descriptions"] != 3.0 || warnings[0]["maxDescriptionBytes"] != float64(tc.limit) {
			t.Errorf("limit %d: warnings %v; want one naming the server and 3 cut", tc.limit, warnings)
		}
		if n := logs.Len(); n > 8<<10 {
			t.Errorf("limit %d: %d bytes logged", tc.limit, n)
		}
	}
	f := newFixture(t)
	f.env["MCP_TOKEN"] = "Bearer x"
	if _, err := f.decode(httpDoc("s", u) + "  maxDescriptionBytes: -1\n"); err == nil || !strings.Contains(err.Error(), "maxDescriptionBytes must not be negative") {
		t.Errorf("a negative bound: %v", err)
	}
}

// TestLargeSchemasAreLeftOut: the bound on a schema's subschemas left the
// texts in them unbounded, and a tool's input schema goes into every
// prompt as its description does. A schema cannot be cut without
// changing what it accepts, so a tool whose input or output schema is
// over the server's maxSchemaBytes (64 KiB by default) is left out,
// saying why; the server's other tools stay.
func TestLargeSchemasAreLeftOut(t *testing.T) {
	wordy := map[string]any{"type": "object", "properties": map[string]any{
		"q": map[string]any{"type": "string", "description": strings.Repeat("d", 100<<10)}}}
	u := listingServer(t, []map[string]any{
		{"name": "echo", "description": "Echo a message.", "inputSchema": object()},
		{"name": "wordy", "description": "Wordy input.", "inputSchema": wordy},
		{"name": "shaped", "description": "Wordy output.", "inputSchema": object(), "outputSchema": wordy},
	})
	for _, tc := range []struct {
		extra string
		kept  []string
	}{
		{"", []string{"s__echo"}},
		{"  maxSchemaBytes: 204800\n", []string{"s__echo", "s__shaped", "s__wordy"}},
	} {
		var logs logtest.Buffer
		f := newFixture(t, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
		f.env["MCP_TOKEN"] = "Bearer x"
		set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("s", u) + tc.extra)})
		var got []string
		for _, tl := range f.m.Tools(set) {
			got = append(got, tl.Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.kept) {
			t.Errorf("%q: tools %v, want %v", tc.extra, got, tc.kept)
		}
		if len(tc.kept) == 1 {
			for _, want := range []string{`input schema: 102`, `output schema: 102`, `more than the server's maxSchemaBytes (65536)`} {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("the log does not say %q: %s", want, logs.String())
				}
			}
		}
	}
	f := newFixture(t)
	f.env["MCP_TOKEN"] = "Bearer x"
	if _, err := f.decode(httpDoc("s", u) + "  maxSchemaBytes: -1\n"); err == nil || !strings.Contains(err.Error(), "maxSchemaBytes must not be negative") {
		t.Errorf("a negative bound: %v", err)
	}
}
