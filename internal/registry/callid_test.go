package registry

import (
	"regexp"
	"strconv"
	"testing"
	"time"
)

func TestNewCallIDSortsByTimeAndNeverRepeats(t *testing.T) {
	shape := regexp.MustCompile(`^call_[0-9a-f]{32}$`)
	seen := map[string]bool{}
	var first []string
	for range 10000 {
		id := NewCallID()
		if !shape.MatchString(id) {
			t.Fatalf("id %q is not call_ and 32 hex digits", id)
		}
		if seen[id] {
			t.Fatalf("id %q made twice", id)
		}
		seen[id] = true
		if len(first) < 100 {
			first = append(first, id)
		}
	}
	time.Sleep(2 * time.Millisecond)
	later := NewCallID()
	for _, id := range first {
		if later <= id {
			t.Fatalf("id %q, made milliseconds later, sorts before %q", later, id)
		}
	}
	// The prefix is the clock's milliseconds.
	before := time.Now().UnixMilli()
	id := NewCallID()
	after := time.Now().UnixMilli()
	ms, err := strconv.ParseInt(id[len("call_"):len("call_")+12], 16, 64)
	if err != nil || ms < before || ms > after {
		t.Fatalf("id %q: time prefix %d (%v), want between %d and %d", id, ms, err, before, after)
	}
}
