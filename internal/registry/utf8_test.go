package registry

import "testing"

func TestTrimPartialRune(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", ""},
		{"abc", "abc"},
		{"aé", "aé"},
		{"a\xc3", "a"},         // é cut after its first byte
		{"a\xe2\x82", "a"},     // € cut after two of three
		{"a\xf0\x9f\x98", "a"}, // 😀 cut after three of four
		{"a😀", "a😀"},           // complete four-byte rune
		{"a\x80\x80\x80\x80", "a\x80\x80\x80\x80"}, // invalid anyway: kept
	}
	for _, c := range cases {
		if got := string(TrimPartialRune([]byte(c.in))); got != c.want {
			t.Errorf("TrimPartialRune(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestClip(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abc", 3, "abc"},
		{"abc", 2, "ab"},
		{"a€b", 3, "a"}, // € is three bytes: it is not split
		{"a€b", 4, "a€"},
		{"€", 0, ""},
	} {
		if got := Clip(c.s, c.n); got != c.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
