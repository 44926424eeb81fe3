package registry

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// searchKey is a tool's name and description, lower-cased once at load so
// a search allocates nothing per tool.
type searchKey struct {
	name, desc string
}

func newSearchKey(t *Tool) searchKey {
	return searchKey{name: strings.ToLower(t.Name), desc: strings.ToLower(t.Description)}
}

// How well one search term matches a tool, best last. The name counts
// before the description: a gateway's tool-search step wants the tool
// the model named, then the tools about what it named.
const (
	noMatch = iota
	descSubstring
	descWord
	nameSubstring
	nameWord
	namePrefix
	nameExact
)

// relevance orders search hits: whole-name matches first, then more
// terms matched, then better matches; ties stay in name order.
type relevance struct {
	exact   bool
	matched int
	score   int
}

func (a relevance) compare(b relevance) int {
	switch {
	case a.exact != b.exact:
		if a.exact {
			return -1
		}
		return 1
	case a.matched != b.matched:
		return b.matched - a.matched
	}
	return b.score - a.score
}

// MaxSearchTerms bounds the words of a tool search. Each word is looked
// for in every tool's name and description, so a search costs its words
// times the catalog: 100,000 words over 500 tools took 47 s of CPU.
const MaxSearchTerms = 32

// CheckSearch says why a search query is refused, or returns nil.
func CheckSearch(q string) error {
	if n := len(strings.Fields(q)); n > MaxSearchTerms {
		return fmt.Errorf("q has %d words; a tool search takes at most %d, so keep the ones that say what the tool should do", n, MaxSearchTerms)
	}
	return nil
}

// queryTerms splits a query into lower-case terms, at most
// MaxSearchTerms of them (CheckSearch refuses longer queries first).
func queryTerms(q string) []string {
	if strings.TrimSpace(q) == "" {
		return nil
	}
	terms := strings.Fields(strings.ToLower(q))
	return terms[:min(len(terms), MaxSearchTerms)]
}

// rank scores k against the query terms; matched is 0 when no term
// matches.
func (k searchKey) rank(query string, terms []string) relevance {
	r := relevance{exact: k.name == query}
	for _, term := range terms {
		if l := k.match(term); l != noMatch {
			r.matched++
			r.score += l
		}
	}
	return r
}

// match scans a string once when the term is not in it, the common case.
func (k searchKey) match(term string) int {
	if strings.Contains(k.name, term) {
		switch {
		case k.name == term:
			return nameExact
		case strings.HasPrefix(k.name, term):
			return namePrefix
		case hasWord(k.name, term):
			return nameWord
		}
		return nameSubstring
	}
	if strings.Contains(k.desc, term) {
		if hasWord(k.desc, term) {
			return descWord
		}
		return descSubstring
	}
	return noMatch
}

// hasWord reports whether term occurs in s between word boundaries (the
// ends of s or characters that are not letters or digits; "_" and "-"
// separate the words of a tool name).
func hasWord(s, term string) bool {
	for off := 0; off+len(term) <= len(s); {
		i := strings.Index(s[off:], term)
		if i < 0 {
			return false
		}
		start, end := off+i, off+i+len(term)
		before, _ := utf8.DecodeLastRuneInString(s[:start])
		after, _ := utf8.DecodeRuneInString(s[end:])
		if (start == 0 || !isWordRune(before)) && (end == len(s) || !isWordRune(after)) {
			return true
		}
		_, size := utf8.DecodeRuneInString(s[start:])
		off = start + size
	}
	return false
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// hit is a tool that matched a search, with how well.
type hit struct {
	tool *Tool
	rel  relevance
}

// sortHits orders hits by relevance, ties by name.
func sortHits(hits []hit) []*Tool {
	slices.SortFunc(hits, func(a, b hit) int {
		if c := a.rel.compare(b.rel); c != 0 {
			return c
		}
		return strings.Compare(a.tool.Name, b.tool.Name)
	})
	out := make([]*Tool, len(hits))
	for i, h := range hits {
		out[i] = h.tool
	}
	return out
}
