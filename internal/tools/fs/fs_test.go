package fs

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/tools/workspace"
)

func TestDefinitionsAreComplete(t *testing.T) {
	ws, err := workspace.New(t.TempDir(), workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tools := Tools(Options{Workspace: ws})
	reg, err := registry.New(registry.Defaults{MaxOutputBytes: 16384}, tools...)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]registry.Tier{
		"fs__read": registry.ReadOnly, "fs__list": registry.ReadOnly, "fs__stat": registry.ReadOnly, "fs__search": registry.ReadOnly,
		"fs__write": registry.SideEffecting, "fs__edit": registry.SideEffecting, "fs__delete": registry.SideEffecting,
	}
	if reg.Len() != len(want) {
		t.Fatalf("registry has %d tools, want %d", reg.Len(), len(want))
	}
	for name, tier := range want {
		tool, ok := reg.Lookup(name)
		if !ok {
			t.Errorf("%s missing", name)
			continue
		}
		if tool.Tier != tier {
			t.Errorf("%s: tier %s, want %s", name, tool.Tier, tier)
		}
		if !strings.Contains(tool.Description, "relative to the workspace root") {
			t.Errorf("%s: description does not say what paths are relative to", name)
		}
		if tool.Annotations == nil || tool.Annotations.ReadOnlyHint == nil || *tool.Annotations.ReadOnlyHint != (tier == registry.ReadOnly) {
			t.Errorf("%s: readOnlyHint does not match the tier", name)
		}
		var s schemaDoc
		if err := json.Unmarshal(tool.Parameters, &s); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s.AdditionalProperties == nil || *s.AdditionalProperties {
			t.Errorf("%s: additionalProperties must be false", name)
		}
		for prop, p := range s.Properties {
			if p.Description == "" {
				t.Errorf("%s.%s: no description", name, prop)
			}
			if p.Type == "string" && p.MaxLength == nil && len(p.Enum) == 0 {
				t.Errorf("%s.%s: string without maxLength", name, prop)
			}
			if p.Type == "integer" && (p.Maximum == nil || p.Minimum == nil) {
				t.Errorf("%s.%s: integer without minimum and maximum", name, prop)
			}
		}
	}
}

type schemaDoc struct {
	AdditionalProperties *bool `json:"additionalProperties"`
	Properties           map[string]struct {
		Type        string   `json:"type"`
		Description string   `json:"description"`
		MaxLength   *int     `json:"maxLength"`
		Minimum     *float64 `json:"minimum"`
		Maximum     *float64 `json:"maximum"`
		Enum        []string `json:"enum"`
	} `json:"properties"`
}

func TestSchemaRejectsBadArguments(t *testing.T) {
	e := newEnv(t, Options{}, 16384)
	cases := []struct {
		tool string
		args any
	}{
		{"fs__read", map[string]any{}},
		{"fs__read", map[string]any{"path": "a", "extra": 1}},
		{"fs__read", map[string]any{"path": "a", "offset": -1}},
		{"fs__read", map[string]any{"path": "a", "limit": 0}},
		{"fs__read", map[string]any{"path": strings.Repeat("a", MaxPathBytes+1)}},
		{"fs__write", map[string]any{"path": "a"}},
		{"fs__write", map[string]any{"path": "a", "content": "x", "mode": "truncate"}},
		{"fs__write", map[string]any{"path": "a", "content": "x", "encoding": "latin1"}},
		{"fs__edit", map[string]any{"path": "a", "oldText": "", "newText": "x"}},
		{"fs__list", map[string]any{"maxEntries": 1000000}},
		{"fs__search", map[string]any{"path": "."}},
	}
	for _, c := range cases {
		if err := e.fail("", c.tool, c.args); err.Code != registry.CodeInvalidArguments {
			t.Errorf("%s %v: code %s, want E_INVALID_ARGUMENTS", c.tool, c.args, err.Code)
		}
	}
}

func TestRead(t *testing.T) {
	e := newEnv(t, Options{}, 16384)
	d := e.dir("")
	mustWrite(t, filepath.Join(d, "notes.txt"), "hello\nworld\n")
	mustWrite(t, filepath.Join(d, "bin.dat"), "a\x00b\x01")
	mustWrite(t, filepath.Join(d, "latin1.txt"), "caf\xe9")
	mustWrite(t, filepath.Join(d, "utf8.txt"), "ééé") // 6 bytes
	mustWrite(t, filepath.Join(d, "empty"), "")
	if err := os.Mkdir(filepath.Join(d, "sub"), 0o750); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name     string
		args     map[string]any
		content  string // decoded
		encoding string
		next     int64 // 0: not truncated
	}{
		{"text", map[string]any{"path": "notes.txt"}, "hello\nworld\n", "utf-8", 0},
		{"dot slash", map[string]any{"path": "./notes.txt"}, "hello\nworld\n", "utf-8", 0},
		{"offset and limit", map[string]any{"path": "notes.txt", "offset": 6, "limit": 3}, "wor", "utf-8", 9},
		{"offset at end", map[string]any{"path": "notes.txt", "offset": 12}, "", "utf-8", 0},
		{"binary", map[string]any{"path": "bin.dat"}, "a\x00b\x01", "base64", 0},
		{"invalid utf-8", map[string]any{"path": "latin1.txt"}, "caf\xe9", "base64", 0},
		{"limit inside a character", map[string]any{"path": "utf8.txt", "limit": 3}, "é", "utf-8", 2},
		{"limit smaller than a character", map[string]any{"path": "utf8.txt", "limit": 1}, "\xc3", "base64", 1},
		{"empty", map[string]any{"path": "empty"}, "", "utf-8", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r readResult
			e.ok("", "fs__read", c.args, &r)
			got := r.Content
			if r.Encoding == "base64" {
				b, err := base64.StdEncoding.DecodeString(r.Content)
				if err != nil {
					t.Fatal(err)
				}
				got = string(b)
			}
			if got != c.content || r.Encoding != c.encoding {
				t.Errorf("got %q (%s), want %q (%s)", got, r.Encoding, c.content, c.encoding)
			}
			if r.BytesRead != int64(len(c.content)) {
				t.Errorf("bytesRead %d, want %d", r.BytesRead, len(c.content))
			}
			if c.next == 0 && (r.Truncated || r.NextOffset != nil) {
				t.Errorf("truncated %v next %v, want whole", r.Truncated, r.NextOffset)
			}
			if c.next != 0 && (!r.Truncated || r.NextOffset == nil || *r.NextOffset != c.next) {
				t.Errorf("truncated %v next %v, want next %d", r.Truncated, r.NextOffset, c.next)
			}
		})
	}

	errs := []struct {
		name string
		args map[string]any
		code registry.Code
		text string
	}{
		{"missing", map[string]any{"path": "nope.txt"}, registry.CodeTool, "does not exist"},
		{"directory", map[string]any{"path": "sub"}, registry.CodeTool, "is a directory"},
		{"offset past end", map[string]any{"path": "notes.txt", "offset": 13}, registry.CodeInvalidArguments, "past the end"},
		{"file as directory", map[string]any{"path": "notes.txt/x"}, registry.CodeTool, "not a directory"},
	}
	for _, c := range errs {
		t.Run(c.name, func(t *testing.T) {
			err := e.fail("", "fs__read", c.args)
			if err.Code != c.code || !strings.Contains(err.Message, c.text) {
				t.Errorf("got %s %q, want %s containing %q", err.Code, err.Message, c.code, c.text)
			}
			if err.Suggestion == "" {
				t.Error("no suggestion")
			}
		})
	}
}

// TestReadPagesWithinOutputLimit reads files larger than the output limit
// page by page: every page fits the limit as structured output, and the
// pages put together are the file.
func TestReadPagesWithinOutputLimit(t *testing.T) {
	const limit = 4096
	e := newEnv(t, Options{}, limit)
	d := e.dir("k")
	var text strings.Builder
	for i := 0; text.Len() < 50000; i++ {
		fmt.Fprintf(&text, "line %d: \"quoted\" \\ tab\t ctrl\x01 é 世界 \u2028\n", i)
	}
	bin := bytes.Repeat([]byte{0, 1, 2, 0xff, 0xfe}, 9000)
	mustWrite(t, filepath.Join(d, "text.txt"), text.String())
	mustWrite(t, filepath.Join(d, "bin.dat"), string(bin))

	for name, want := range map[string]string{"text.txt": text.String(), "bin.dat": string(bin)} {
		var got []byte
		offset, pages := int64(0), 0
		for {
			res := e.call("k", "fs__read", map[string]any{"path": name, "offset": offset})
			if res.Status != registry.StatusOK || res.Truncated {
				t.Fatalf("%s at %d: status %s truncated %v error %+v", name, offset, res.Status, res.Truncated, res.Error)
			}
			if len(res.Output) > limit {
				t.Fatalf("%s: output %d bytes, over the limit %d", name, len(res.Output), limit)
			}
			var r readResult
			if err := json.Unmarshal(res.Output, &r); err != nil {
				t.Fatal(err)
			}
			chunk := []byte(r.Content)
			if r.Encoding == "base64" {
				var err error
				if chunk, err = base64.StdEncoding.DecodeString(r.Content); err != nil {
					t.Fatal(err)
				}
			} else if !utf8.Valid(chunk) {
				t.Fatalf("%s: text page is not valid UTF-8", name)
			}
			if int64(len(chunk)) != r.BytesRead || len(chunk) == 0 && r.Truncated {
				t.Fatalf("%s: page of %d bytes says bytesRead %d truncated %v", name, len(chunk), r.BytesRead, r.Truncated)
			}
			got = append(got, chunk...)
			pages++
			if !r.Truncated {
				break
			}
			offset = *r.NextOffset
		}
		if string(got) != want {
			t.Errorf("%s: pages put together differ from the file (%d vs %d bytes)", name, len(got), len(want))
		}
		if pages < len(want)/limit {
			t.Errorf("%s: %d pages for %d bytes with a %d byte limit", name, pages, len(want), limit)
		}
	}
}

func TestList(t *testing.T) {
	e := newEnv(t, Options{}, 1<<20)
	d := e.dir("")
	mustWrite(t, filepath.Join(d, "b.txt"), "bb")
	mustWrite(t, filepath.Join(d, "a.go"), "package a")
	mustWrite(t, filepath.Join(d, "src", "main.go"), "package main\n")
	mustWrite(t, filepath.Join(d, "src", "util", "x_test.go"), "package util")
	mustWrite(t, filepath.Join(d, "src", "util", "x.go"), "package util")
	mustSymlink(t, "b.txt", filepath.Join(d, "link"))

	cases := []struct {
		name string
		args map[string]any
		want []string // "path type size"
		cut  bool
	}{
		{"root", map[string]any{}, []string{"a.go file 9", "b.txt file 2", "link symlink 5", "src dir 0"}, false},
		{"recursive", map[string]any{"recursive": true}, []string{
			"a.go file 9", "b.txt file 2", "link symlink 5", "src dir 0", "src/main.go file 13",
			"src/util dir 0", "src/util/x.go file 12", "src/util/x_test.go file 12"}, false},
		{"sub-directory", map[string]any{"path": "src/util"}, []string{"src/util/x.go file 12", "src/util/x_test.go file 12"}, false},
		{"name glob", map[string]any{"recursive": true, "glob": "*.go"}, []string{"a.go file 9", "src/main.go file 13", "src/util/x.go file 12", "src/util/x_test.go file 12"}, false},
		{"path glob", map[string]any{"recursive": true, "glob": "src/**/*_test.go"}, []string{"src/util/x_test.go file 12"}, false},
		{"glob below path", map[string]any{"path": "src", "recursive": true, "glob": "util/*"}, []string{"src/util/x.go file 12", "src/util/x_test.go file 12"}, false},
		{"max entries", map[string]any{"recursive": true, "maxEntries": 3}, []string{"a.go file 9", "b.txt file 2", "link symlink 5"}, true},
		{"a file", map[string]any{"path": "src/main.go"}, []string{"src/main.go file 13"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r listResult
			e.ok("", "fs__list", c.args, &r)
			var got []string
			for _, en := range r.Entries {
				got = append(got, fmt.Sprintf("%s %s %d", en.Path, en.Type, en.Size))
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
			if r.Count != len(r.Entries) || r.Truncated != c.cut || c.cut && r.Reason == "" {
				t.Errorf("count %d truncated %v reason %q", r.Count, r.Truncated, r.Reason)
			}
		})
	}
	if err := e.fail("", "fs__list", map[string]any{"path": "missing"}); !strings.Contains(err.Message, "does not exist") {
		t.Errorf("missing directory: %q", err.Message)
	}
	if err := e.fail("", "fs__list", map[string]any{"glob": "[a-"}); err.Code != registry.CodeInvalidArguments {
		t.Errorf("bad glob: %s", err.Code)
	}
}

func TestListBounded(t *testing.T) {
	e := newEnv(t, Options{MaxScanEntries: 500}, 2048)
	d := e.dir("")
	for i := range 300 {
		mustWrite(t, filepath.Join(d, "many", fmt.Sprintf("f%04d.txt", i)), "x")
	}
	for i := range 300 {
		mustWrite(t, filepath.Join(d, "more", fmt.Sprintf("g%04d.txt", i)), "x")
	}
	// The output limit cuts the listing into structured output.
	var r listResult
	e.ok("", "fs__list", map[string]any{"path": "many"}, &r)
	if !r.Truncated || !strings.Contains(r.Reason, "output limit") || len(r.Entries) == 0 || len(r.Entries) >= 300 {
		t.Errorf("output-limited listing: %d entries, truncated %v, reason %q", len(r.Entries), r.Truncated, r.Reason)
	}
	for i, en := range r.Entries {
		if want := fmt.Sprintf("many/f%04d.txt", i); en.Path != want {
			t.Fatalf("entry %d is %s, want %s (sorted)", i, en.Path, want)
		}
	}
	// The scan limit stops a walk over a large tree even when few entries match.
	r = listResult{}
	e.ok("", "fs__list", map[string]any{"recursive": true, "glob": "nothing-matches"}, &r)
	if !r.Truncated || !strings.Contains(r.Reason, `looked at 500 entries, the limit, while reading "more"`) || len(r.Entries) != 0 {
		t.Errorf("scan-limited listing: %d entries, truncated %v, reason %q", len(r.Entries), r.Truncated, r.Reason)
	}
	// A directory larger than the scan limit is read in part, in the file
	// system's order: its sorted listing has gaps, and must say so even
	// when the output limit cut it first.
	for i := range 300 {
		mustWrite(t, filepath.Join(d, "more", fmt.Sprintf("h%04d.txt", i)), "x")
	}
	r = listResult{}
	e.ok("", "fs__list", map[string]any{"path": "more"}, &r)
	if !r.Truncated || !strings.Contains(r.Reason, `"more" has over 500 entries`) || !strings.Contains(r.Reason, "names between the ones shown may exist") {
		t.Errorf("listing of a directory over the scan limit: %d entries, truncated %v, reason %q", len(r.Entries), r.Truncated, r.Reason)
	}
}

func TestStat(t *testing.T) {
	e := newEnv(t, Options{}, 16384)
	d := e.dir("")
	mustWrite(t, filepath.Join(d, "f.txt"), "12345")
	if err := os.Chmod(filepath.Join(d, "f.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, "f.txt", filepath.Join(d, "l"))
	cases := []struct {
		path, typ, mode, target string
		size                    int64
		exists                  bool
	}{
		{"f.txt", "file", "0600", "", 5, true},
		{".", "dir", "0750", "", -1, true},
		{"l", "symlink", "", "f.txt", 5, true},
		{"missing", "", "", "", 0, false},
		{"missing/deeper", "", "", "", 0, false},
	}
	for _, c := range cases {
		var r statResult
		e.ok("", "fs__stat", map[string]any{"path": c.path}, &r)
		if r.Exists != c.exists || r.Type != c.typ || r.LinkTarget != c.target || c.size >= 0 && r.Size != c.size {
			t.Errorf("%s: %+v", c.path, r)
		}
		if c.mode != "" && r.Mode != c.mode {
			t.Errorf("%s: mode %s, want %s", c.path, r.Mode, c.mode)
		}
		if c.exists && r.ModTime == "" {
			t.Errorf("%s: no modTime", c.path)
		}
	}
}

func TestSearch(t *testing.T) {
	e := newEnv(t, Options{}, 1<<20)
	d := e.dir("")
	mustWrite(t, filepath.Join(d, "a.go"), "package a\n\nfunc Alpha() {}\n// TODO: beta\n")
	mustWrite(t, filepath.Join(d, "src", "b.go"), "package b\r\nfunc beta() {}\r\n")
	mustWrite(t, filepath.Join(d, "src", "notes.md"), "todo: write docs\n")
	mustWrite(t, filepath.Join(d, "bin.dat"), "func \x00 binary")
	long := strings.Repeat("é", 400) + "NEEDLE" + strings.Repeat("x", 1000)
	mustWrite(t, filepath.Join(d, "long.txt"), "short\n"+long+"\n")

	type m = string // "path:line:column text"
	cases := []struct {
		name string
		args map[string]any
		want []m
		cut  bool
	}{
		{"all files", map[string]any{"pattern": `func \w+`}, []m{"a.go:3:1 func Alpha() {}", "src/b.go:2:1 func beta() {}"}, false},
		{"glob", map[string]any{"pattern": "func", "glob": "src/*.go"}, []m{"src/b.go:2:1 func beta() {}"}, false},
		{"ignore case", map[string]any{"pattern": "todo", "ignoreCase": true}, []m{"a.go:4:4 // TODO: beta", "src/notes.md:1:1 todo: write docs"}, false},
		{"single file", map[string]any{"pattern": "beta", "path": "src/b.go"}, []m{"src/b.go:2:6 func beta() {}"}, false},
		{"max matches", map[string]any{"pattern": "package", "maxMatches": 1}, []m{"a.go:1:1 package a"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r searchResult
			e.ok("", "fs__search", c.args, &r)
			var got []string
			for _, x := range r.Matches {
				got = append(got, fmt.Sprintf("%s:%d:%d %s", x.Path, x.Line, x.Column, x.Text))
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
			if r.Truncated != c.cut || r.MatchCount != len(r.Matches) || c.cut && r.Reason == "" {
				t.Errorf("truncated %v reason %q count %d", r.Truncated, r.Reason, r.MatchCount)
			}
		})
	}

	var r searchResult
	e.ok("", "fs__search", map[string]any{"pattern": "NEEDLE"}, &r)
	if len(r.Matches) != 1 {
		t.Fatalf("long line: %+v", r)
	}
	x := r.Matches[0]
	if x.Line != 2 || !strings.Contains(x.Text, "NEEDLE") || len(x.Text) > maxMatchText+2*len("…") || !utf8.ValidString(x.Text) ||
		!strings.HasPrefix(x.Text, "…") || !strings.HasSuffix(x.Text, "…") {
		t.Errorf("long line excerpt: line %d, %d bytes: %q", x.Line, len(x.Text), x.Text)
	}

	if err := e.fail("", "fs__search", map[string]any{"pattern": `(?<=a)b`}); err.Code != registry.CodeInvalidArguments || !strings.Contains(err.Suggestion, "RE2") {
		t.Errorf("look-behind: %+v", err)
	}
}

func TestSearchByteLimit(t *testing.T) {
	e := newEnv(t, Options{MaxSearchBytes: 10000}, 1<<20)
	d := e.dir("")
	for i := range 5 {
		mustWrite(t, filepath.Join(d, fmt.Sprintf("f%d.txt", i)), strings.Repeat("hay hay hay\n", 300)+"needle\n") // 3607 bytes each
	}
	var r searchResult
	e.ok("", "fs__search", map[string]any{"pattern": "needle"}, &r)
	if !r.Truncated || !strings.Contains(r.Reason, "byte limit") || r.BytesScanned > 10000 || len(r.Matches) != 2 {
		t.Errorf("got %d matches, %d bytes, truncated %v, reason %q", len(r.Matches), r.BytesScanned, r.Truncated, r.Reason)
	}
}

func TestWrite(t *testing.T) {
	e := newEnv(t, Options{MaxWriteBytes: 1000}, 16384)
	d := e.dir("w")
	steps := []struct {
		args    map[string]any
		content string // of the file afterwards
		created bool
	}{
		{map[string]any{"path": "a.txt", "content": "one"}, "one", true},
		{map[string]any{"path": "a.txt", "content": "two"}, "two", false},
		{map[string]any{"path": "a.txt", "content": "+three", "mode": "append"}, "two+three", false},
		{map[string]any{"path": "deep/er/b.txt", "content": "nested", "mode": "create"}, "nested", true},
		{map[string]any{"path": "c.bin", "content": base64.StdEncoding.EncodeToString([]byte{0, 1, 2}), "encoding": "base64"}, "\x00\x01\x02", true},
		{map[string]any{"path": "new.log", "content": "x", "mode": "append"}, "x", true},
		{map[string]any{"path": "new/dir/o.txt", "content": "o"}, "o", true},
		{map[string]any{"path": "new/dir/log.txt", "content": "l", "mode": "append"}, "l", true},
		// An overwrite with less content leaves nothing of the old behind.
		{map[string]any{"path": "s.txt", "content": "a longer first version"}, "a longer first version", true},
		{map[string]any{"path": "s.txt", "content": "short"}, "short", false},
		{map[string]any{"path": "s.txt", "content": ""}, "", false},
		{map[string]any{"path": "s.txt", "content": "again", "mode": "overwrite"}, "again", false},
	}
	for _, s := range steps {
		var r writeResult
		e.ok("w", "fs__write", s.args, &r)
		got, err := os.ReadFile(filepath.Join(d, filepath.FromSlash(s.args["path"].(string))))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != s.content || r.Size != int64(len(s.content)) || r.Created != s.created {
			t.Errorf("%v: file %q, result %+v", s.args, got, r)
		}
	}
	errs := []struct {
		args map[string]any
		code registry.Code
		text string
	}{
		{map[string]any{"path": "a.txt", "content": "x", "mode": "create"}, registry.CodeTool, "already exists"},
		{map[string]any{"path": "x.bin", "content": "not base64!", "encoding": "base64"}, registry.CodeInvalidArguments, "base64"},
		{map[string]any{"path": "big", "content": strings.Repeat("x", 1001)}, registry.CodeInvalidArguments, "limit is 1000"},
		{map[string]any{"path": ".", "content": "x"}, registry.CodeInvalidArguments, "root"},
		{map[string]any{"path": "deep", "content": "x"}, registry.CodeTool, "is a directory"},
		{map[string]any{"path": "a.txt/b", "content": "x"}, registry.CodeTool, "not a directory"},
		{map[string]any{"path": "newdir/", "content": "x"}, registry.CodeInvalidArguments, `ends in "/", so it names a directory`},
		{map[string]any{"path": "newdir/.", "content": "x"}, registry.CodeInvalidArguments, `"newdir/" ends in "/", so it names a directory`},
		{map[string]any{"path": "a.txt/", "content": "x"}, registry.CodeInvalidArguments, "names a directory"},
	}
	for _, c := range errs {
		err := e.fail("w", "fs__write", c.args)
		if err.Code != c.code || !strings.Contains(err.Message, c.text) {
			t.Errorf("%v: got %s %q, want %s with %q", c.args, err.Code, err.Message, c.code, c.text)
		}
	}
	if _, err := os.Stat(filepath.Join(d, "big")); !os.IsNotExist(err) {
		t.Error("an over-size write created its file")
	}
	if _, err := os.Lstat(filepath.Join(d, "newdir")); !os.IsNotExist(err) {
		t.Error(`a write to "newdir/" created newdir`)
	}
	if got, _ := os.ReadFile(filepath.Join(d, "a.txt")); string(got) != "two+three" {
		t.Errorf("a failed create changed the file: %q", got)
	}
}

func TestEdit(t *testing.T) {
	e := newEnv(t, Options{MaxWriteBytes: 1000}, 16384)
	d := e.dir("")
	p := filepath.Join(d, "main.go")
	orig := "package main\n\nfunc a() {\n\treturn\n}\n\nfunc b() {\n\treturn\n}\n"
	mustWrite(t, p, orig)
	if err := os.Chmod(p, 0o604); err != nil {
		t.Fatal(err)
	}

	var r editResult
	e.ok("", "fs__edit", map[string]any{"path": "main.go", "oldText": "func b() {\n\treturn", "newText": "func b() {\n\tprintln()\n\treturn"}, &r)
	want := strings.Replace(orig, "func b() {\n\treturn", "func b() {\n\tprintln()\n\treturn", 1)
	got, _ := os.ReadFile(p)
	if string(got) != want || r.Line != 7 || r.Replaced != 1 || r.Size != int64(len(want)) {
		t.Errorf("edit: file %q result %+v", got, r)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o604 {
		t.Errorf("edit changed the mode to %v", fi.Mode().Perm())
	}
	e.ok("", "fs__edit", map[string]any{"path": "main.go", "oldText": "\tprintln()\n", "newText": ""}, &r)
	if got, _ := os.ReadFile(p); string(got) != orig {
		t.Errorf("deleting text: %q", got)
	}

	mustWrite(t, filepath.Join(d, "crlf.txt"), "one\r\ntwo\r\n")
	mustWrite(t, filepath.Join(d, "big.txt"), strings.Repeat("x", 1001))
	mustWrite(t, filepath.Join(d, "aaa.txt"), "aaa")
	errs := []struct {
		args map[string]any
		text []string
	}{
		{map[string]any{"path": "main.go", "oldText": "\treturn\n", "newText": "x"}, []string{"occurs 2 times", "lines 4, 8"}},
		{map[string]any{"path": "main.go", "oldText": "func c()", "newText": "x"}, []string{"not found"}},
		{map[string]any{"path": "crlf.txt", "oldText": "one\ntwo", "newText": "x"}, []string{"not found", `"\r\n" line endings`}},
		{map[string]any{"path": "main.go", "oldText": "  func a()", "newText": "x"}, []string{"not found", "whitespace"}},
		{map[string]any{"path": "aaa.txt", "oldText": "aa", "newText": "b"}, []string{"occurs 2 times"}},
		{map[string]any{"path": "big.txt", "oldText": "x", "newText": "y"}, []string{"at most 1000 bytes"}},
		{map[string]any{"path": "nope.go", "oldText": "x", "newText": "y"}, []string{"does not exist"}},
	}
	for _, c := range errs {
		err := e.fail("", "fs__edit", c.args)
		all := err.Message + " | " + err.Suggestion
		for _, want := range c.text {
			if !strings.Contains(all, want) {
				t.Errorf("%v: %q lacks %q", c.args, all, want)
			}
		}
	}
	for name, want := range map[string]string{"main.go": orig, "crlf.txt": "one\r\ntwo\r\n", "aaa.txt": "aaa"} {
		if got, _ := os.ReadFile(filepath.Join(d, name)); string(got) != want {
			t.Errorf("a failed edit changed %s: %q", name, got)
		}
	}
}

func TestDelete(t *testing.T) {
	e := newEnv(t, Options{}, 16384)
	d := e.dir("")
	mustWrite(t, filepath.Join(d, "f.txt"), "x")
	mustWrite(t, filepath.Join(d, "dir", "a", "b.txt"), "x")
	mustWrite(t, filepath.Join(d, "target.txt"), "keep")
	mustSymlink(t, "target.txt", filepath.Join(d, "link"))

	var r deleteResult
	e.ok("", "fs__delete", map[string]any{"path": "f.txt"}, &r)
	if _, err := os.Lstat(filepath.Join(d, "f.txt")); !os.IsNotExist(err) || r.Type != "file" || !r.Deleted {
		t.Errorf("file: %v %+v", err, r)
	}
	if err := e.fail("", "fs__delete", map[string]any{"path": "dir"}); !strings.Contains(err.Suggestion, "recursive: true") {
		t.Errorf("directory without recursive: %+v", err)
	}
	if _, err := os.Stat(filepath.Join(d, "dir", "a", "b.txt")); err != nil {
		t.Errorf("a refused delete removed files: %v", err)
	}
	e.ok("", "fs__delete", map[string]any{"path": "dir", "recursive": true}, &r)
	if _, err := os.Lstat(filepath.Join(d, "dir")); !os.IsNotExist(err) || r.Type != "dir" {
		t.Errorf("recursive: %v %+v", err, r)
	}
	e.ok("", "fs__delete", map[string]any{"path": "link"}, &r)
	if _, err := os.Lstat(filepath.Join(d, "link")); !os.IsNotExist(err) || r.Type != "symlink" {
		t.Errorf("symlink: %v %+v", err, r)
	}
	if b, _ := os.ReadFile(filepath.Join(d, "target.txt")); string(b) != "keep" {
		t.Error("deleting a link removed its target")
	}
	for _, p := range []string{".", "", "./"} {
		if err := e.fail("", "fs__delete", map[string]any{"path": p, "recursive": true}); err.Code != registry.CodeInvalidArguments {
			t.Errorf("delete %q: %+v", p, err)
		}
	}
	if _, err := os.Stat(d); err != nil {
		t.Fatal("the workspace root is gone")
	}
	if err := e.fail("", "fs__delete", map[string]any{"path": "gone"}); !strings.Contains(err.Message, "does not exist") {
		t.Errorf("missing: %+v", err)
	}
}

func TestInstanceKeysIsolate(t *testing.T) {
	e := newEnv(t, Options{}, 16384)
	e.ok("conv-a", "fs__write", map[string]any{"path": "private.txt", "content": "for a only"}, nil)
	var r readResult
	e.ok("conv-a", "fs__read", map[string]any{"path": "private.txt"}, &r)
	if r.Content != "for a only" {
		t.Errorf("key a reads %q", r.Content)
	}
	if err := e.fail("conv-b", "fs__read", map[string]any{"path": "private.txt"}); !strings.Contains(err.Message, "does not exist") {
		t.Errorf("key b: %+v", err)
	}
	var s statResult
	e.ok("conv-b", "fs__stat", map[string]any{"path": "private.txt"}, &s)
	if s.Exists {
		t.Error("key b sees key a's file")
	}
	var l listResult
	e.ok("conv-b", "fs__list", map[string]any{"recursive": true}, &l)
	if len(l.Entries) != 0 {
		t.Errorf("key b lists %+v", l.Entries)
	}
	var m searchResult
	e.ok("conv-b", "fs__search", map[string]any{"pattern": "for a only"}, &m)
	if len(m.Matches) != 0 {
		t.Errorf("key b finds %+v", m.Matches)
	}
	// Keys that look like paths are confined too.
	e.ok("../conv-a", "fs__write", map[string]any{"path": "private.txt", "content": "overwritten"}, nil)
	e.ok("conv-a", "fs__read", map[string]any{"path": "private.txt"}, &r)
	if r.Content != "for a only" {
		t.Errorf("key ../conv-a reached key a's file: %q", r.Content)
	}
}

// TestReadingMakesNoDirectory: a caller that may only read cannot fill the
// workspace with the directories of made-up instance keys; it sees an
// empty workspace until something is written there.
func TestReadingMakesNoDirectory(t *testing.T) {
	e := newEnv(t, Options{}, 16384)
	instances := filepath.Join(e.base, "callers", "anonymous", "instances")
	for i, c := range []struct {
		tool string
		args map[string]any
	}{
		{"fs__list", map[string]any{"path": ".", "recursive": true}},
		{"fs__stat", map[string]any{"path": "."}},
		{"fs__search", map[string]any{"pattern": "x"}},
	} {
		e.ok(fmt.Sprintf("made-up-%d", i), c.tool, c.args, nil)
	}
	if err := e.fail("made-up-r", "fs__read", map[string]any{"path": "a.txt"}); !strings.Contains(err.Message, `"a.txt" does not exist`) {
		t.Errorf("fs__read in a new instance: %+v", err)
	}
	if _, err := os.Lstat(instances); !os.IsNotExist(err) {
		entries, _ := os.ReadDir(instances)
		t.Fatalf("reading calls made instance directories: %v", entries)
	}
	e.ok("made-up-0", "fs__write", map[string]any{"path": "a.txt", "content": "now"}, nil)
	var r readResult
	e.ok("made-up-0", "fs__read", map[string]any{"path": "a.txt"}, &r)
	var l listResult
	e.ok("made-up-0", "fs__list", map[string]any{"path": "."}, &l)
	if r.Content != "now" || l.Count != 1 {
		t.Errorf("after a write: read %q, list %+v", r.Content, l)
	}
}

// TestPartialDeleteSaysSo: a recursive delete that fails part-way has
// deleted some of the directory already, and must not read as if nothing
// happened. An immutable file (chattr +i) stops it even for root.
func TestPartialDeleteSaysSo(t *testing.T) {
	e := newEnv(t, Options{}, 16384)
	d := e.dir("")
	mustWrite(t, filepath.Join(d, "pd", "a"), "a")
	mustWrite(t, filepath.Join(d, "pd", "c", "x"), "x")
	stuck := filepath.Join(d, "pd", "c", "x")
	if out, err := exec.Command("chattr", "+i", stuck).CombinedOutput(); err != nil {
		t.Skipf("chattr +i is not available here (%v: %s); the partial delete needs a file that cannot be removed", err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", stuck).Run() })
	err := e.fail("", "fs__delete", map[string]any{"path": "pd", "recursive": true})
	if !strings.Contains(err.Message, `"pd/c/x"`) || !strings.Contains(err.Message, "1 file or directory in it was deleted already") || !strings.Contains(err.Suggestion, `fs__list on "pd"`) {
		t.Errorf("partial delete: %+v", err)
	}
	if _, serr := os.Lstat(filepath.Join(d, "pd", "a")); !os.IsNotExist(serr) {
		t.Fatalf("pd/a was not deleted (%v), so this delete was not partial", serr)
	}
}

// TestDanglingLinkSaysSo: a link to nothing both "does not exist" (to
// overwrite) and "already exists" (to create); the model needs to hear
// that it is a link, and how to get rid of it.
func TestDanglingLinkSaysSo(t *testing.T) {
	e := newEnv(t, Options{MaxWriteBytes: 1000}, 16384)
	d := e.dir("")
	mustSymlink(t, "missing-target", filepath.Join(d, "dl"))
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"fs__write", map[string]any{"path": "dl", "content": "x"}},
		{"fs__write", map[string]any{"path": "dl", "content": "x", "mode": "create"}},
		{"fs__write", map[string]any{"path": "dl", "content": "x", "mode": "append"}},
		{"fs__read", map[string]any{"path": "dl"}},
		{"fs__edit", map[string]any{"path": "dl", "oldText": "a", "newText": "b"}},
	} {
		err := e.fail("", c.tool, c.args)
		if !strings.Contains(err.Message, `"dl" is a symbolic link to "missing-target", which does not exist`) || !strings.Contains(err.Suggestion, "fs__delete") {
			t.Errorf("%s %v: %+v", c.tool, c.args, err)
		}
	}
	e.ok("", "fs__delete", map[string]any{"path": "dl"}, nil)
	e.ok("", "fs__write", map[string]any{"path": "dl", "content": "x", "mode": "create"}, nil)
}

// TestWriteDescriptionGivesTheRequestLimit: a model following "at most 4
// MiB per call" against a service taking 1 MiB requests got a 413 it could
// not act on; the description says what fits and how to write more.
func TestWriteDescriptionGivesTheRequestLimit(t *testing.T) {
	ws, err := workspace.New(t.TempDir(), workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	describe := func(o Options) string {
		o.Workspace = ws
		for _, tool := range Tools(o) {
			if tool.Name == "fs__write" {
				return tool.Description
			}
		}
		t.Fatal("no fs__write")
		return ""
	}
	if d := describe(Options{MaxWriteBytes: 4 << 20, MaxRequestBytes: 1 << 20}); !strings.Contains(d, "a call's whole request is at most 1048576 bytes") || !strings.Contains(d, `the rest with "append"`) || strings.Contains(d, "4194304") {
		t.Errorf("with a 1 MiB request limit: %s", d)
	}
	if d := describe(Options{MaxWriteBytes: 1 << 20, MaxRequestBytes: 8 << 20}); !strings.Contains(d, "at most 1048576 bytes per call") {
		t.Errorf("with a larger request limit: %s", d)
	}
}

// TestStatOfAnInstanceNotMadeYet: fs__stat of "." in a new instance showed
// mode 0555, as if the workspace could not be written.
func TestStatOfAnInstanceNotMadeYet(t *testing.T) {
	e := newEnv(t, Options{}, 16384)
	var s statResult
	e.ok("not-made-yet", "fs__stat", map[string]any{"path": "."}, &s)
	if !s.Exists || s.Type != "dir" || s.Mode != "0750" {
		t.Errorf("fs__stat . of a new instance: %+v", s)
	}
}
