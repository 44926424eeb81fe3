package registry

import "testing"

// QuotedPrefix and QuotedSuffix cut where the escaped text reaches the
// budget, on character boundaries, counting what appendQuoted writes.
func TestQuotedPrefixAndSuffix(t *testing.T) {
	for _, c := range []struct {
		s              string
		budget         int
		prefix, suffix int
	}{
		{"abcdef", 4, 4, 2},
		{"\x01\x01\x01", 12, 2, 1}, // six bytes each
		{"é\"é", 4, 3, 2},          // é is 2, a quote 2
		{"a\xffb", 4, 2, 1},        // invalid UTF-8 is U+FFFD, 3 bytes
		{"😀x", 3, 0, 4},            // a character is not split
		{"short", 100, 5, 0},
	} {
		if got := QuotedPrefix(c.s, c.budget); got != c.prefix {
			t.Errorf("QuotedPrefix(%q, %d) = %d, want %d", c.s, c.budget, got, c.prefix)
		}
		if got := QuotedSuffix(c.s, c.budget); got != c.suffix {
			t.Errorf("QuotedSuffix(%q, %d) = %d, want %d", c.s, c.budget, got, c.suffix)
		}
		if n := len(appendQuoted(nil, c.s[:QuotedPrefix(c.s, c.budget)])) - 2; n > c.budget {
			t.Errorf("%q: the prefix escapes to %d bytes, over %d", c.s, n, c.budget)
		}
	}
}
