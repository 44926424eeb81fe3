package registry

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// encodeOutput marshals a tool's output, cutting it to limit bytes of JSON.
// Output that fits is returned as it is. Output that does not becomes a JSON
// string: the text of a string output, or the JSON text of any other output,
// cut on a character boundary so that the encoded string stays within limit,
// followed by the marker "[output truncated: N bytes total, M omitted]".
// Either way the result is valid JSON and valid UTF-8.
func encodeOutput(v any, limit int) (out json.RawMessage, truncated bool, original int64, err error) {
	return encodeOutputMark(v, limit, nil)
}

// cutMark builds the marker of a cut output. full is the text that was
// cut (a string output's text, or any other output's JSON text), kept how
// many of its bytes the output shows, total the output's serialized size
// and omitted how many of those bytes the output does not show.
type cutMark func(full string, kept int, total, omitted int64) string

// encodeOutputMark is encodeOutput with the marker built by mark (nil:
// the marker without read-on hint).
func encodeOutputMark(v any, limit int, mark cutMark) (out json.RawMessage, truncated bool, original int64, err error) {
	if s, ok := v.(string); ok {
		n := quotedLen(s)
		if limit <= 0 || n <= limit {
			return appendQuoted(make([]byte, 0, n), s), false, int64(n), nil
		}
		return truncatedString(s, s, limit, int64(n), mark), true, int64(n), nil
	}
	var b []byte
	if raw, ok := v.(json.RawMessage); ok {
		if !json.Valid(raw) {
			s := string(raw)
			return encodeOutputMark(s, limit, mark)
		}
		b = raw
	} else {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return nil, false, 0, err
		}
		b = bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})
	}
	if limit <= 0 || len(b) <= limit {
		return b, false, int64(len(b)), nil
	}
	// Any text of at least limit bytes encodes to at least limit bytes.
	// The structured output is never clipped as JSON: its text becomes a
	// string, and the spill holds all of it.
	return truncatedString(string(b[:limit]), string(b), limit, int64(len(b)), mark), true, int64(len(b)), nil
}

// truncatedString encodes the longest prefix of s (a prefix of full) whose
// JSON string form (with its opening quote) fits in limit bytes, then the
// marker.
func truncatedString(s, full string, limit int, total int64, mark cutMark) json.RawMessage {
	out := make([]byte, 0, limit+256)
	out = append(out, '"')
	out, kept := appendBodyN(out, s, limit-1)
	// What is omitted is counted in the text that was cut, as the read-on
	// offset (kept) is: what a reader reading on from there has left.
	omitted := int64(len(full) - kept)
	marker := "[output truncated: " + strconv.FormatInt(total, 10) + " bytes total, " + strconv.FormatInt(omitted, 10) + " omitted]"
	if mark != nil {
		marker = mark(full, kept, total, omitted)
	}
	out = appendBody(out, "\n"+marker, -1)
	return append(out, '"')
}

// appendQuoted appends s as a JSON string. Invalid UTF-8 becomes U+FFFD.
func appendQuoted(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendBody(dst, s, -1)
	return append(dst, '"')
}

// appendBody appends the escaped characters of s. With limit >= 0 it stops
// before the appended bytes would exceed limit.
func appendBody(dst []byte, s string, limit int) []byte {
	dst, _ = appendBodyN(dst, s, limit)
	return dst
}

// appendBodyN is appendBody that also returns how many bytes of s it
// consumed.
func appendBodyN(dst []byte, s string, limit int) ([]byte, int) {
	start := len(dst)
	var enc [8]byte
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		e := appendEscaped(enc[:0], r)
		if limit >= 0 && len(dst)-start+len(e) > limit {
			return dst, i
		}
		dst = append(dst, e...)
		i += size
	}
	return dst, len(s)
}

func appendEscaped(dst []byte, r rune) []byte {
	switch r {
	case '"':
		return append(dst, '\\', '"')
	case '\\':
		return append(dst, '\\', '\\')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	if r < 0x20 {
		const hex = "0123456789abcdef"
		return append(dst, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xf])
	}
	return utf8.AppendRune(dst, r)
}

// QuotedLen is the length of s written as a JSON string, quotes included,
// as results write it.
func QuotedLen(s string) int { return quotedLen(s) }

// QuotedPrefix returns how many bytes of s (cut at a character boundary)
// fit in budget bytes written as the body of a JSON string, as results
// write it: text that escapes (control characters take six bytes) fits
// less of itself than its length says.
func QuotedPrefix(s string, budget int) int {
	_, n := appendBodyN(make([]byte, 0, min(max(budget, 0), len(s)*6)), s, max(budget, 0))
	return n
}

// QuotedSuffix is QuotedPrefix from the end: the offset in s where the
// longest suffix that fits in budget bytes begins.
func QuotedSuffix(s string, budget int) int {
	n := 0
	var enc [8]byte
	for i := len(s); i > 0; {
		r, size := utf8.DecodeLastRuneInString(s[:i])
		if n += len(appendEscaped(enc[:0], r)); n > budget {
			return i
		}
		i -= size
	}
	return 0
}

// quotedLen is the length of s encoded as a JSON string.
func quotedLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		// Eight bytes at a time while none needs escaping or decoding.
		if i+8 <= len(s) {
			b := s[i : i+8]
			if plainASCII8(uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
				uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56) {
				n += 8
				i += 8
				continue
			}
		}
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
				n += 2
			case c < 0x20:
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		n += utf8.RuneLen(r) // U+FFFD (3 bytes) for invalid UTF-8
		i += size
	}
	return n
}

// plainASCII8 reports whether none of the eight bytes of w is a control
// character, '"', '\\' or a byte of a multi-byte UTF-8 sequence (the
// bit tricks of "Bit Twiddling Hacks", "Determine if a word has a byte
// less than n").
func plainASCII8(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	hasZero := func(x uint64) bool { return (x-ones)&^x&highs != 0 }
	return w&highs == 0 && (w-ones*0x20)&^w&highs == 0 && !hasZero(w^(ones*'"')) && !hasZero(w^(ones*'\\'))
}
