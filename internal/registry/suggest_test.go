package registry

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// nameCatalog is a registry of n names only (no schemas to compile): the
// index and Closest read nothing else. Its names mix the shapes of real
// catalogs (resource__verb_object) with generated ones.
func nameCatalog(n int) *Registry {
	resources := []string{"github", "gitlab", "jira", "slack", "fs", "http", "json", "text", "data", "shell", "calendar", "mail", "drive", "sheets", "crm", "billing"}
	verbs := []string{"get", "list", "create", "update", "delete", "search", "read", "write", "send", "query", "parse", "transform"}
	objects := []string{"issue", "comment", "file", "user", "event", "message", "row", "invoice", "page", "label", "branch", "record"}
	seen := map[string]bool{}
	var tools []*Tool
	add := func(name string) {
		if !seen[name] && len(tools) < n {
			seen[name] = true
			tools = append(tools, &Tool{Definition: Definition{Name: name}, lowerName: strings.ToLower(name)})
		}
	}
	for _, r := range resources {
		for _, v := range verbs {
			for _, o := range objects {
				add(r + "__" + v + "_" + o)
			}
		}
	}
	for i := 0; len(tools) < n; i++ {
		add(fmt.Sprintf("gen%02d__tool%05d", i%100, i))
	}
	slices.SortFunc(tools, func(a, b *Tool) int { return strings.Compare(a.Name, b.Name) })
	return &Registry{tools: tools, index: newNameIndex(tools)}
}

// typo misspells name once: a character dropped, added, replaced or
// swapped with the next, or the case of a letter changed.
func typo(rng *rand.Rand, name string) string {
	b := []byte(name)
	i := rng.IntN(len(b))
	letters := "abcdefghijklmnopqrstuvwxyz0123456789_"
	switch rng.IntN(5) {
	case 0:
		return string(b[:i]) + string(b[i+1:])
	case 1:
		return string(b[:i]) + string(letters[rng.IntN(len(letters))]) + string(b[i:])
	case 2:
		b[i] = letters[rng.IntN(len(letters))]
	case 3:
		if i+1 < len(b) {
			b[i], b[i+1] = b[i+1], b[i]
		}
	default:
		return strings.ToUpper(name[:i+1]) + name[i+1:]
	}
	return string(b)
}

// TestClosestIndexMatchesExhaustive: with the trigram index (a catalog
// of 10,000), the best suggestion for a misspelt name is the one the
// exhaustive edit distance over every name gives.
func TestClosestIndexMatchesExhaustive(t *testing.T) {
	reg := nameCatalog(10000)
	if reg.index.postings == nil {
		t.Fatal("a catalog of 10,000 names has no index")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	differ, tested := 0, 0
	for range 250 {
		name := reg.tools[rng.IntN(len(reg.tools))].Name
		for _, q := range []string{typo(rng, name), typo(rng, typo(rng, name))} {
			if _, ok := reg.Lookup(q); ok {
				continue
			}
			tested++
			got, want := reg.Closest(nil, q, 3), closestReference(reg, q, 3)
			if len(want) > 0 && (len(got) == 0 || got[0] != want[0]) {
				differ++
				t.Errorf("Closest(%q) = %v; the exhaustive search gives %v", q, got, want)
			}
		}
	}
	t.Logf("%d typos, %d best suggestions differ", tested, differ)
}

// TestClosestSmallCatalogIsExhaustive: under exhaustiveBelow tools every
// name is compared, so the whole answer is the exhaustive one.
func TestClosestSmallCatalogIsExhaustive(t *testing.T) {
	reg := nameCatalog(exhaustiveBelow - 1)
	if reg.index.postings != nil {
		t.Fatal("a small catalog was indexed")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		q := typo(rng, reg.tools[rng.IntN(len(reg.tools))].Name)
		if got, want := reg.Closest(nil, q, 3), closestReference(reg, q, 3); !slices.Equal(got, want) {
			t.Errorf("Closest(%q) = %v, want %v", q, got, want)
		}
	}
}

// TestClosestHonoursCaller: the index's candidates are still filtered by
// what the caller may see.
func TestClosestHonoursCaller(t *testing.T) {
	reg := nameCatalog(2000)
	for _, tl := range reg.tools {
		tl.Tier = ReadOnly
	}
	only := &Caller{ID: "c", Tools: []string{"jira__*"}, MaxTier: Privileged}
	got := reg.Closest(only, "github__get_isue", 3)
	for _, n := range got {
		if !strings.HasPrefix(n, "jira__") {
			t.Errorf("suggested %s to a caller limited to jira__*", n)
		}
	}
	if all := reg.Closest(nil, "github__get_isue", 3); len(all) == 0 || all[0] != "github__get_issue" {
		t.Errorf("Closest(github__get_isue) = %v, want github__get_issue first", all)
	}
}

// TestPatternDistanceMatchesEditDistance: the bit-parallel distance is
// the Levenshtein distance.
func TestPatternDistanceMatchesEditDistance(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	queries := []string{"a", "fs__read", strings.Repeat("x", 64), "ｆｓ__read", "über__tool", "fs__réad"}
	names := []string{"", "a", "fs__read", strings.Repeat("x", MaxNameLength)}
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = "ab_c"[rng.IntN(4)]
		}
		return string(b)
	}
	for range 300 {
		queries = append(queries, word(1+rng.IntN(64)))
		names = append(names, word(rng.IntN(MaxNameLength+1)))
	}
	for i, q := range queries {
		pat := newPattern([]rune(q))
		for _, name := range names[i%7 : i%7+40] {
			if got, want := pat.distance(name), EditDistance(q, name); got != want {
				t.Errorf("distance(%q, %q) = %d, want %d", q, name, got, want)
			}
		}
	}
}

// TestClosestIndexWideRunes: a misspelling with a rune wider than a byte
// (which spans more byte trigrams) still finds the exhaustive best.
func TestClosestIndexWideRunes(t *testing.T) {
	reg := nameCatalog(10000)
	for _, q := range []string{"github__get_issué", "jira__sëarch_file", "ｓlack__send_message", "gen01__tööl00001", "crm__list_rowé"} {
		got, want := reg.Closest(nil, q, 3), closestReference(reg, q, 3)
		if len(want) > 0 && (len(got) == 0 || got[0] != want[0]) {
			t.Errorf("Closest(%q) = %v; the exhaustive search gives %v", q, got, want)
		}
	}
}
