package registry

import "unicode/utf8"

// Clip returns s cut to at most n bytes on a character boundary (s
// itself when it is no longer).
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// TrimPartialRune drops the incomplete UTF-8 sequence (at most three
// bytes) that a cut may leave at the end of b, and leaves complete or
// invalid-anyway bytes alone. Tools that cut output at a byte limit use
// it so that what they keep is still text.
func TrimPartialRune(b []byte) []byte {
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < utf8.RuneSelf {
			return b // ASCII: nothing pending
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}
