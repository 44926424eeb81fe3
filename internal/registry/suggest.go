package registry

import (
	"cmp"
	"runtime"
	"slices"
	"strings"
	"unicode/utf8"
)

// nameIndex finds the names near a misspelt one without comparing it with
// every name: a posting list per character trigram of the lower-cased
// names (padded with '^' and '$', which no name contains), built once with
// the registry (a reload builds a new one).
//
// A name within d edits of an ASCII query shares all but at most 3d of
// the query's distinct trigrams with it, so it is in at least one of any
// 3d+1 of the query's posting lists (a trigram no name has is an empty
// list; a query with wider runes counts more trigrams per edit).
// Closest reads the rarest lists first, d = 0, 1, 2 …, comparing each
// name it meets by edit distance, and stops at the first d with a name
// within d edits: that name is then the exact best, ties included. A
// query whose lists are too common for that (more than postingBudget
// postings) falls back to the names sharing the most of its trigrams.
// Either way the work depends on the query, not the catalog's size.
//
// Below exhaustiveBelow tools every name is compared: that is cheap, and
// exact for every rank.
type nameIndex struct {
	postings map[uint32][]int32 // trigram → indices of the tools holding it, ascending
	// scratch keeps the working memory of finished queries for the next
	// ones (a channel rather than a sync.Pool, which may drop what it is
	// given: a query would then allocate in proportion to the catalog).
	scratch chan *gramScratch
	size    int
}

const (
	// exhaustiveBelow is the catalog size under which Closest compares
	// every name.
	exhaustiveBelow = 128
	// postingBudget bounds the postings one query reads.
	postingBudget = 1024
	// fallbackCandidates is how many of the names sharing the most
	// trigrams are compared when the exact search is over budget.
	fallbackCandidates = 24
)

// gramScratch is one query's working memory: a mark per tool (the
// query's generation when it was compared), shared-trigram counts for the
// fallback, and the query's posting lists.
type gramScratch struct {
	mark    []uint32
	gen     uint32
	count   []uint8
	touched []int32
	lists   [][]int32
	top     []int32
}

func newNameIndex(tools []*Tool) *nameIndex {
	ix := &nameIndex{}
	if len(tools) < exhaustiveBelow {
		return ix
	}
	ix.postings = make(map[uint32][]int32)
	for i, t := range tools {
		eachGram(t.lowerName, func(g uint32) {
			l := ix.postings[g]
			if len(l) == 0 || l[len(l)-1] != int32(i) { // once per name
				ix.postings[g] = append(l, int32(i))
			}
		})
	}
	ix.size = len(tools)
	ix.scratch = make(chan *gramScratch, max(4, 2*runtime.GOMAXPROCS(0)))
	return ix
}

// getScratch returns a kept scratch, or a new one when every kept one is
// in use.
func (ix *nameIndex) getScratch() *gramScratch {
	select {
	case sc := <-ix.scratch:
		return sc
	default:
		return &gramScratch{mark: make([]uint32, ix.size), count: make([]uint8, ix.size)}
	}
}

// putScratch keeps sc for a later query, unless enough are kept.
func (ix *nameIndex) putScratch(sc *gramScratch) {
	select {
	case ix.scratch <- sc:
	default:
	}
}

// eachGram calls f with each trigram of "^" + s + "$", as three bytes.
func eachGram(s string, f func(uint32)) {
	if len(s) == 0 {
		f('^'<<8 | '$')
		return
	}
	var w uint32 = '^'
	for i := 0; i <= len(s); i++ {
		c := byte('$')
		if i < len(s) {
			c = s[i]
		}
		w = (w<<8 | uint32(c)) & 0xffffff
		if i >= 1 {
			f(w)
		}
	}
}

// queryLists returns the posting list of each distinct trigram of lname,
// rarest first (nil for a trigram no name has).
func (ix *nameIndex) queryLists(sc *gramScratch, lname string) [][]int32 {
	lists := sc.lists[:0]
	var grams [MaxNameLength * 4]uint32
	ng := 0
	eachGram(lname, func(g uint32) {
		for _, x := range grams[:ng] {
			if x == g {
				return
			}
		}
		if ng < len(grams) {
			grams[ng] = g
			ng++
			lists = append(lists, ix.postings[g])
		}
	})
	slices.SortFunc(lists, func(a, b []int32) int { return cmp.Compare(len(a), len(b)) })
	sc.lists = lists
	return lists
}

// mostShared returns the indices of the tools sharing the most trigrams
// with the query (ties: the earlier name), reading at most postingBudget
// postings, rarest lists first.
func (sc *gramScratch) mostShared(lists [][]int32) []int32 {
	read := 0
	for n, l := range lists {
		if n > 0 && read+len(l) > postingBudget {
			break
		}
		l = l[:min(len(l), postingBudget)]
		read += len(l)
		for _, i := range l {
			if sc.count[i] == 0 {
				sc.touched = append(sc.touched, i)
			}
			if sc.count[i] < 255 {
				sc.count[i]++
			}
		}
	}
	out := sc.top[:0]
	for _, i := range sc.touched {
		c := sc.count[i]
		k := len(out)
		for k > 0 && (sc.count[out[k-1]] < c || sc.count[out[k-1]] == c && out[k-1] > i) {
			k--
		}
		if k >= fallbackCandidates {
			continue
		}
		if len(out) < fallbackCandidates {
			out = append(out, 0)
		}
		copy(out[k+1:], out[k:len(out)-1])
		out[k] = i
	}
	for _, i := range sc.touched {
		sc.count[i] = 0
	}
	sc.touched = sc.touched[:0]
	sc.top = out
	return out
}

// Closest returns up to n names the caller may see that are closest to
// name, for the suggestion of E_TOOL_NOT_FOUND: by edit distance (case
// ignored), ties by name, each within max(3, len(name)/3) edits or, for
// a name of three characters or more, containing it. In a catalog of
// exhaustiveBelow tools or more, the trigram index finds the names to
// compare (see nameIndex): the first is the exact best whenever the
// query's rare trigrams allow, the others are near but not always the
// nearest.
func (r *Registry) Closest(caller *Caller, name string, n int) []string {
	lname := strings.ToLower(name)
	c := closest{caller: caller, lname: lname, query: []rune(lname), limit: max(3, len(name)/3), n: n}
	names := make([]string, 0, max(n, 0))
	// Tool names have at most MaxNameLength characters, and the distance
	// is at least the difference in length: a much longer name is near
	// none of them, nor contained in any.
	if len(c.query) > MaxNameLength+c.limit || n <= 0 {
		return names
	}
	c.pattern = newPattern(c.query)
	c.best = make([]scored, 0, n+1)
	if r.index.postings == nil {
		for _, t := range r.tools {
			c.consider(t)
		}
	} else {
		r.closestIndexed(&c)
	}
	for _, s := range c.best {
		names = append(names, s.name)
	}
	return names
}

func (r *Registry) closestIndexed(c *closest) {
	ix := r.index
	sc := ix.getScratch()
	defer ix.putScratch(sc)
	sc.gen++
	if sc.gen == 0 { // wrapped: old marks could collide
		clear(sc.mark)
		sc.gen = 1
	}
	lists := ix.queryLists(sc, c.lname)
	defer func() { clear(sc.lists); sc.lists = sc.lists[:0] }()
	read, covered := 0, 0
	// One edit changes at most three trigrams of an ASCII query; a rune
	// of k bytes spans k+2 byte trigrams.
	per := 3
	for _, r := range c.query {
		per = max(per, 2+utf8.RuneLen(r))
	}
	for d := 0; per*d+1 <= len(lists); d++ {
		for ; covered < per*d+1; covered++ {
			l := lists[covered]
			if read += len(l); read > postingBudget {
				goto fallback
			}
			for _, i := range l {
				if sc.mark[i] != sc.gen {
					sc.mark[i] = sc.gen
					c.consider(r.tools[i])
				}
			}
		}
		if len(c.best) > 0 && c.best[0].dist <= d {
			return // every name within d edits was compared
		}
	}
fallback:
	for _, i := range sc.mostShared(lists) {
		if sc.mark[i] != sc.gen {
			sc.mark[i] = sc.gen
			c.consider(r.tools[i])
		}
	}
}

// scored is a name and its distance to the query.
type scored struct {
	name string
	dist int
}

// closest is one Closest query: the best n names so far, in order.
type closest struct {
	caller  *Caller
	lname   string
	query   []rune
	pattern pattern
	limit   int
	n       int
	best    []scored
}

func (c *closest) consider(t *Tool) {
	ln := t.lowerName
	if abs(len(c.query)-len(ln)) > c.limit && (len(c.lname) < 3 || len(ln) < len(c.lname)) {
		return // too far apart in length alone, and too short to contain it
	}
	var d int
	if c.pattern.m > 0 {
		d = c.pattern.distance(ln)
	} else {
		d = nameDistance(c.query, ln)
	}
	if d > c.limit && !(len(c.lname) >= 3 && strings.Contains(ln, c.lname)) {
		return
	}
	s := scored{t.Name, d}
	cmpScored := func(a, b scored) int {
		return cmp.Or(cmp.Compare(a.dist, b.dist), strings.Compare(a.name, b.name))
	}
	if len(c.best) == c.n && cmpScored(s, c.best[c.n-1]) > 0 {
		return // worse than every name kept
	}
	if c.caller != nil && !c.caller.Sees(&t.Definition) {
		return
	}
	i, _ := slices.BinarySearchFunc(c.best, s, cmpScored)
	if i < c.n {
		c.best = slices.Insert(c.best, i, s)[:min(len(c.best)+1, c.n)]
	}
}

// pattern is a query prepared for Myers' bit-parallel edit distance (in
// Hyyrö's form): one machine word per column of the matrix, so a name is
// compared in a few nanoseconds per character.
type pattern struct {
	peq   [128]uint64 // bit j set: the query's j-th rune is this ASCII byte
	m     int
	shift uint // m-1: the bit of the last row
}

// newPattern prepares query; a query too long for one word (or empty)
// gives a pattern with m == 0, and nameDistance compares it instead.
func newPattern(query []rune) (p pattern) {
	if len(query) == 0 || len(query) > 64 {
		return p
	}
	p.m, p.shift = len(query), uint(len(query)-1)
	for j, c := range query {
		if c < 128 { // a rune beyond ASCII matches no name's byte
			p.peq[c] |= 1 << j
		}
	}
	return p
}

// distance is the Levenshtein distance between the query and an ASCII
// name.
func (p *pattern) distance(name string) int {
	pv, mv, score := ^uint64(0), uint64(0), p.m
	for i := 0; i < len(name); i++ {
		eq := p.peq[name[i]&0x7f]
		xv := eq | mv
		xh := (((eq & pv) + pv) ^ pv) | eq
		ph := mv | ^(xh | pv)
		mh := pv & xh
		// The last row's change, without branches (they mispredict).
		score += int(ph>>p.shift&1) - int(mh>>p.shift&1)
		ph = ph<<1 | 1
		mh <<= 1
		pv = mh | ^(xv | ph)
		mv = ph & xv
	}
	return score
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// nameDistance is the Levenshtein distance between a (as runes) and a
// registered tool name b, which is ASCII and at most MaxNameLength long,
// computed without allocating; for queries newPattern does not take.
func nameDistance(a []rune, b string) int {
	if len(b) > MaxNameLength {
		return EditDistance(string(a), b)
	}
	var rows [2][MaxNameLength + 1]int
	prev, cur := rows[0][:len(b)+1], rows[1][:len(b)+1]
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == rune(b[j-1]) {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// EditDistance is the Levenshtein distance between a and b, in runes.
func EditDistance(a, b string) int {
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
