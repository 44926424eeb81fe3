package registry

import (
	"fmt"
	"strings"
	"testing"
)

func searchRegistry(t testing.TB) *Registry {
	t.Helper()
	mk := func(name, desc string) *Tool {
		tl := tool(name, ReadOnly, echo)
		tl.Description = desc
		return tl
	}
	reg, err := New(Defaults{},
		mk("read__file", "Returns the content of one path."),
		mk("fs__read", "Read a text file from the workspace."),
		mk("threads__list", "List the open threads."),
		mk("notes__get", "Get a note that was already read."),
		mk("data__parse", "Parse CSV into rows, reader-friendly."),
		mk("fs__search", "Search files for a regular expression."),
		mk("zz__unrelated", "Nothing to see here."),
		mk("aa__rEAd", "Same word, other case."),
	)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestListRanksByRelevance(t *testing.T) {
	reg := searchRegistry(t)
	cases := []struct{ q, want string }{
		// name prefix, a word of the name (ties by name), part of the
		// name, a word of the description, part of the description
		{"read", "read__file,aa__rEAd,fs__read,threads__list,notes__get,data__parse"},
		{"READ", "read__file,aa__rEAd,fs__read,threads__list,notes__get,data__parse"},
		// the whole query as a name comes first
		{"fs__read", "fs__read"},
		{"fs", "fs__read,fs__search"},
		// more words matched first, then better matches, then names
		{"read file", "read__file,fs__read,aa__rEAd,threads__list,notes__get,data__parse,fs__search"},
		{"  regular   EXPRESSION ", "fs__search"},
		{"nothing-matches-this", ""},
		{"", "aa__rEAd,data__parse,fs__read,fs__search,notes__get,read__file,threads__list,zz__unrelated"},
	}
	for _, c := range cases {
		var names []string
		for _, tl := range reg.List(nil, Filter{Query: c.q}) {
			names = append(names, tl.Name)
		}
		if got := strings.Join(names, ","); got != c.want {
			t.Errorf("List(q=%q) = %s\n want %s", c.q, got, c.want)
		}
	}
	// Filters still apply to a search.
	got := reg.List(&Caller{Tools: []string{"fs__*"}}, Filter{Query: "read"})
	if len(got) != 1 || got[0].Name != "fs__read" {
		t.Errorf("search with a caller's globs: %v", got)
	}
}

func TestHasWord(t *testing.T) {
	cases := []struct {
		s, term string
		want    bool
	}{
		{"fs__read", "read", true},
		{"fs__reader", "read", false},
		{"a read.", "read", true},
		{"reread it", "read", false},
		{"reread read", "read", true},
		{"über-read", "read", true},
		{"éread", "read", false},
		{"", "read", false},
	}
	for _, c := range cases {
		if got := hasWord(c.s, c.term); got != c.want {
			t.Errorf("hasWord(%q, %q) = %v", c.s, c.term, got)
		}
	}
}

func TestListSearchAllocations(t *testing.T) {
	reg := searchRegistry(t)
	// the hits, the result, and the query's words
	if n := testing.AllocsPerRun(100, func() { reg.List(nil, Filter{Query: "read file"}) }); n > 3 {
		t.Errorf("List with a query allocates %v times, want at most 3", n)
	}
	if n := testing.AllocsPerRun(100, func() { reg.List(nil, Filter{}) }); n > 1 {
		t.Errorf("List without a query allocates %v times, want 1", n)
	}
}

// BenchmarkListQuery is a tool search over a large catalog.
func BenchmarkListQuery(b *testing.B) {
	var tools []*Tool
	for i := range 500 {
		tl := tool(fmt.Sprintf("res%03d__export%d", i, i%7), ReadOnly, echo)
		tl.Description = fmt.Sprintf("Tool number %d reads, writes and searches things of kind %d in the workspace.", i, i%13)
		tools = append(tools, tl)
	}
	reg, err := New(Defaults{}, tools...)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(reg.List(nil, Filter{Query: "export3 searches"})) == 0 {
			b.Fatal("no hits")
		}
	}
}

func TestSearchTermsAreBounded(t *testing.T) {
	q := strings.Repeat("read ", 10*MaxSearchTerms)
	if got := len(queryTerms(q)); got != MaxSearchTerms {
		t.Errorf("queryTerms kept %d terms, want %d", got, MaxSearchTerms)
	}
	if err := CheckSearch(q); err == nil || !strings.Contains(err.Error(), "at most 32") {
		t.Errorf("CheckSearch(%d words) = %v", 10*MaxSearchTerms, err)
	}
	if err := CheckSearch(strings.Repeat("read ", MaxSearchTerms)); err != nil {
		t.Errorf("CheckSearch(%d words) = %v", MaxSearchTerms, err)
	}
}
