package registry

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Defaults fill in what a definition leaves unset.
type Defaults struct {
	Timeout           time.Duration
	MaxTimeout        time.Duration
	MaxOutputBytes    int
	ErrorMessageLimit int
}

// Registry holds every loaded tool. It is immutable once built, so a reload
// builds a new one and swaps it in while calls in flight keep theirs.
type Registry struct {
	tools  []*Tool // sorted by name
	byName map[string]*Tool
	keys   []searchKey // keys[i] is the search key of tools[i]
}

// New validates and compiles tools into a registry: names checked, schemas
// compiled once, defaults applied, duplicates refused. Errors name the tool
// and, when known, the file and line it came from.
func New(d Defaults, tools ...*Tool) (*Registry, error) {
	r := &Registry{byName: make(map[string]*Tool, len(tools))}
	for _, t := range tools {
		if err := prepare(t, d); err != nil {
			return nil, sourceError(t, err)
		}
		if prev, dup := r.byName[t.Name]; dup {
			return nil, sourceError(t, fmt.Errorf("duplicate tool name %q (first declared %s)", t.Name, cmp.Or(prev.Source, "built in")))
		}
		r.byName[t.Name] = t
		r.tools = append(r.tools, t)
	}
	slices.SortFunc(r.tools, func(a, b *Tool) int { return strings.Compare(a.Name, b.Name) })
	r.keys = make([]searchKey, len(r.tools))
	for i, t := range r.tools {
		r.keys[i] = newSearchKey(t)
	}
	return r, nil
}

func sourceError(t *Tool, err error) error {
	if t.Source != "" {
		return fmt.Errorf("%s: tool %q: %w", t.Source, t.Name, err)
	}
	return fmt.Errorf("tool %q: %w", t.Name, err)
}

func prepare(t *Tool, d Defaults) error {
	if err := ValidateName(t.Name); err != nil {
		return err
	}
	if t.Handler == nil {
		return fmt.Errorf("has no handler")
	}
	if strings.TrimSpace(t.Description) == "" {
		return fmt.Errorf("has no description")
	}
	if !t.Tier.Valid() {
		return fmt.Errorf("unknown tier %q (want read_only, side_effecting or privileged)", t.Tier)
	}
	if t.Timeout <= 0 {
		t.Timeout = d.Timeout
	}
	if d.MaxTimeout > 0 && t.Timeout > d.MaxTimeout {
		t.Timeout = d.MaxTimeout
	}
	if t.MaxOutputBytes <= 0 {
		t.MaxOutputBytes = d.MaxOutputBytes
	}
	if t.ErrorMessageLimit <= 0 {
		t.ErrorMessageLimit = d.ErrorMessageLimit
	}
	if t.Type == "" {
		t.Type = "builtin"
	}
	sch, err := compileSchema(t.Name, t.Parameters)
	if err != nil {
		return err
	}
	t.schema = sch
	t.suggestion = exampleSuggestion(t.Name, t.Parameters)
	return nil
}

// Len returns the number of tools.
func (r *Registry) Len() int { return len(r.tools) }

// Lookup returns the tool called name.
func (r *Registry) Lookup(name string) (*Tool, bool) {
	t, ok := r.byName[name]
	return t, ok
}

// Filter selects tools from a catalog listing. Zero fields select all.
type Filter struct {
	Tier Tier
	Tag  string
	// Query is a case-insensitive search: a tool matches when one of the
	// query's words is in its name or description.
	Query string
	Names []string
}

// List returns the tools caller may see that match f, sorted by name, or,
// with a query, by relevance: the whole query as the name first, then
// tools matching more of the query's words, then better matches (exact
// name, name prefix, a word of the name, part of the name, a word of the
// description, part of the description), ties by name. A nil caller sees
// everything.
func (r *Registry) List(caller *Caller, f Filter) []*Tool {
	terms := queryTerms(f.Query)
	query := strings.ToLower(strings.TrimSpace(f.Query))
	var hits []hit
	var out []*Tool
	if len(terms) > 0 {
		hits = make([]hit, 0, len(r.tools))
	} else {
		out = make([]*Tool, 0, len(r.tools))
	}
	for i, t := range r.tools {
		if caller != nil && !caller.Sees(&t.Definition) {
			continue
		}
		if f.Tier != "" && t.Tier != f.Tier {
			continue
		}
		if f.Tag != "" && !slices.Contains(t.Tags, f.Tag) {
			continue
		}
		if len(f.Names) > 0 && !slices.Contains(f.Names, t.Name) {
			continue
		}
		if len(terms) > 0 {
			if rel := r.keys[i].rank(query, terms); rel.matched > 0 {
				hits = append(hits, hit{t, rel})
			}
			continue
		}
		out = append(out, t)
	}
	if len(terms) > 0 {
		return sortHits(hits)
	}
	return out
}

// Closest returns up to n names the caller may see that are closest to
// name, for the suggestion of E_TOOL_NOT_FOUND.
func (r *Registry) Closest(caller *Caller, name string, n int) []string {
	type scored struct {
		name string
		dist int
	}
	lname := strings.ToLower(name)
	limit := max(3, len(name)/3)
	var found []scored
	for _, t := range r.tools {
		if caller != nil && !caller.Sees(&t.Definition) {
			continue
		}
		ln := strings.ToLower(t.Name)
		d := levenshtein(lname, ln)
		if d > limit && !(len(lname) >= 3 && strings.Contains(ln, lname)) {
			continue
		}
		found = append(found, scored{t.Name, d})
	}
	slices.SortFunc(found, func(a, b scored) int {
		return cmp.Or(cmp.Compare(a.dist, b.dist), strings.Compare(a.name, b.name))
	})
	names := make([]string, 0, n)
	for i := 0; i < len(found) && i < n; i++ {
		names = append(names, found[i].name)
	}
	return names
}

func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
