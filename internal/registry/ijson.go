package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// jsonChecker checks that JSON is I-JSON (RFC 7493), keeping its decoders
// between checks: a new one costs ten allocations, a kept one none. Its
// zero value is ready, and a nil one makes a decoder for each check.
type jsonChecker struct {
	decoders sync.Pool
}

// Interoperable returns nil when b is exactly one I-JSON value (RFC 7493),
// and otherwise why it is not, in the words the executor uses when it
// refuses arguments: a member name given twice in one object, a number
// beyond what a 64-bit float holds, a lone surrogate or invalid UTF-8, or
// text that is not one JSON value. It is for tools that take JSON from
// their input; each call makes its own decoder.
func Interoperable(b []byte) error {
	return (*jsonChecker)(nil).interoperable(b)
}

// interoperable returns nil when b is exactly one I-JSON value, and
// otherwise why it is not. I-JSON is JSON that every conforming parser
// reads alike: UTF-8 without lone surrogates, unique member names in each
// object, and numbers an IEEE 754 double holds. encoding/json's Valid
// accepts the rest: a number such as 1e999999 that a Go client cannot
// decode at all and JavaScript reads as Infinity; a member sent twice,
// which one reader takes first and another last; and invalid UTF-8.
func (c *jsonChecker) interoperable(b []byte) error {
	var d *jsontext.Decoder
	if c != nil {
		d, _ = c.decoders.Get().(*jsontext.Decoder)
	}
	if d == nil {
		d = jsontext.NewDecoder(bytes.NewReader(b))
	} else {
		d.Reset(bytes.NewReader(b))
	}
	if c != nil {
		defer c.decoders.Put(d)
	}
	for {
		tok, err := d.ReadToken()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("no JSON value")
			}
			return jsontextError(err)
		}
		if tok.Kind() == '0' {
			if _, err := strconv.ParseFloat(tok.String(), 64); err != nil {
				return fmt.Errorf("the number %s at %q is beyond what a 64-bit float holds", Clip(tok.String(), 40), d.StackPointer())
			}
		}
		if d.StackDepth() == 0 {
			break
		}
	}
	if _, err := d.ReadToken(); !errors.Is(err, io.EOF) {
		if err == nil {
			err = errors.New("more than one JSON value")
		}
		return jsontextError(err)
	}
	return nil
}

// jsontextError drops the package's name from err's text.
func jsontextError(err error) error {
	if msg, ok := strings.CutPrefix(err.Error(), "jsontext: "); ok {
		return errors.New(msg)
	}
	return err
}

// SyntaxErrorAt says where in the JSON text b the syntax error se is: the
// byte offset of the character at fault (len(b) when the text ends too
// soon), and se's message naming that whole character, where
// encoding/json names its first byte only ('â' for “).
func SyntaxErrorAt(b []byte, se *json.SyntaxError) (at int, msg string) {
	at = min(max(int(se.Offset)-1, 0), len(b))
	msg = se.Error()
	if strings.HasPrefix(msg, "unexpected end") {
		return len(b), msg
	}
	if at < len(b) {
		if c := "invalid character " + quoteByte(b[at]); strings.HasPrefix(msg, c) {
			r, _ := utf8.DecodeRune(b[at:])
			msg = "invalid character " + strconv.QuoteRune(r) + msg[len(c):]
		}
	}
	return at, msg
}

// quoteByte is how encoding/json quotes the byte it names in a syntax
// error.
func quoteByte(c byte) string {
	switch c {
	case '\'':
		return `'\''`
	case '"':
		return `'"'`
	}
	s := strconv.Quote(string(rune(c)))
	return "'" + s[1:len(s)-1] + "'"
}
