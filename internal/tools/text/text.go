// Package text provides text__transform, a read-only tool for the string
// work models do badly by themselves: case, trimming, replacement, regular
// expressions, splitting and joining, base64, hashes and counts.
package text

import (
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// MaxResultBytes bounds a result whose size can be known before it is
// built (replace); other operations run under the tool memory limit.
const MaxResultBytes = 16 << 20

// Tools returns the text tools.
func Tools() []*registry.Tool {
	return []*registry.Tool{{
		Definition: registry.Definition{
			Name: "text__transform",
			Description: "Transform or measure text exactly, without guessing. Pick one operation: " +
				"upper, lower, title, trim, replace (every occurrence of `find` with `replacement`), " +
				"regex_replace (RE2 `pattern`; `$1` or `${name}` inserts a group, `${1}` when a letter, digit or _ follows, `$$` a $), regex_find (all matches of `pattern` with their groups), " +
				"split (by `separator`), join (`parts` with `separator`), base64_encode, base64_decode, " +
				"hash (`algorithm` md5, sha1, sha256 or sha512; hex digest), count (characters, bytes, words, lines). " +
				"Returns {\"result\": ...}.",
			Tier:         registry.ReadOnly,
			Tags:         []string{"text"},
			Parameters:   json.RawMessage(schema),
			OutputSchema: json.RawMessage(outputSchema),
			Annotations:  readOnly(),
		},
		Handler: registry.Func(run),
	}}
}

func readOnly() *registry.Annotations {
	t, f := true, false
	return &registry.Annotations{Title: "Transform text", ReadOnlyHint: &t, IdempotentHint: &t, OpenWorldHint: &f}
}

const schema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["operation"],
  "properties": {
    "operation": {"type": "string", "description": "What to do with the text.",
      "enum": ["upper", "lower", "title", "trim", "replace", "regex_replace", "regex_find", "split", "join", "base64_encode", "base64_decode", "hash", "count"]},
    "text": {"type": "string", "maxLength": 1048576, "description": "The input text (every operation except join)."},
    "find": {"type": "string", "minLength": 1, "maxLength": 10000, "description": "replace: the exact text to find."},
    "pattern": {"type": "string", "minLength": 1, "maxLength": 1000, "description": "regex_replace, regex_find: an RE2 regular expression (no backreferences or lookaround)."},
    "replacement": {"type": "string", "maxLength": 100000, "description": "replace, regex_replace: the text to put in; in regex_replace $1 or ${name} insert groups (${1} when a letter, digit or _ follows; $$ for a $)."},
    "separator": {"type": "string", "maxLength": 1000, "description": "split, join: the separator (split default: newline; join default: empty)."},
    "parts": {"type": "array", "maxItems": 100000, "items": {"type": "string"}, "description": "join: the strings to join."},
    "algorithm": {"type": "string", "enum": ["md5", "sha1", "sha256", "sha512"], "description": "hash: the digest to compute (default sha256)."},
    "limit": {"type": "integer", "minimum": 1, "maximum": 10000, "description": "regex_find, split: at most this many results (default 1000); note says when there were more."}
  },
  "allOf": [
    {"if": {"properties": {"operation": {"const": "join"}}}, "then": {"required": ["parts"]}, "else": {"required": ["text"]}},
    {"if": {"properties": {"operation": {"const": "replace"}}}, "then": {"required": ["find"]}},
    {"if": {"properties": {"operation": {"enum": ["regex_replace", "regex_find"]}}}, "then": {"required": ["pattern"]}}
  ]
}`

// outputSchema is what every operation returns: the result, and for
// replace the count, for base64_decode of non-text bytes their encoding.
const outputSchema = `{
  "type": "object",
  "required": ["result"],
  "properties": {
    "result": {"description": "The operation's result: a string, a list (split, regex_find) or counts (count)."},
    "replacements": {"type": "integer", "description": "replace: how many occurrences were replaced."},
    "encoding": {"type": "string", "description": "base64_decode: hex when the bytes are not UTF-8 text."},
    "note": {"type": "string"}
  }
}`

type args struct {
	Operation   string   `json:"operation"`
	Text        *string  `json:"text"`
	Find        string   `json:"find"`
	Pattern     string   `json:"pattern"`
	Replacement string   `json:"replacement"`
	Separator   *string  `json:"separator"`
	Parts       []string `json:"parts"`
	Algorithm   string   `json:"algorithm"`
	Limit       int      `json:"limit"`
}

type result struct {
	Result any `json:"result"`
	// Note says the result stopped at limit.
	Note string `json:"note,omitempty"`
}

func run(_ context.Context, req *registry.Request) (any, error) {
	var a args
	if err := req.Bind(&a); err != nil {
		return nil, err
	}
	if a.Limit == 0 {
		a.Limit = 1000
	}
	if a.Operation != "join" && a.Text == nil {
		return nil, missing(a.Operation, "text")
	}
	text := ""
	if a.Text != nil {
		text = *a.Text
	}
	switch a.Operation {
	case "upper":
		return result{Result: strings.ToUpper(text)}, nil
	case "lower":
		return result{Result: strings.ToLower(text)}, nil
	case "title":
		return result{Result: title(text)}, nil
	case "trim":
		return result{Result: strings.TrimSpace(text)}, nil
	case "replace":
		if a.Find == "" {
			return nil, missing(a.Operation, "find")
		}
		// The output's size is known before it is built: refuse what
		// would not fit rather than ask for the memory.
		n := strings.Count(text, a.Find)
		if size := int64(len(text)) + int64(n)*(int64(len(a.Replacement))-int64(len(a.Find))); size > MaxResultBytes {
			return nil, registry.ToolError(
				fmt.Sprintf("the result would be %d bytes (%d replacements of %d bytes by %d); the limit is %d", size, n, len(a.Find), len(a.Replacement), MaxResultBytes),
				"Replace in a smaller part of the text, or with a shorter replacement.")
		}
		return map[string]any{"result": strings.ReplaceAll(text, a.Find, a.Replacement), "replacements": n}, nil
	case "regex_replace":
		re, err := compile(a.Pattern, a.Operation)
		if err != nil {
			return nil, err
		}
		if err := checkReplacement(re, a.Replacement); err != nil {
			return nil, err
		}
		return result{Result: re.ReplaceAllString(text, a.Replacement)}, nil
	case "regex_find":
		re, err := compile(a.Pattern, a.Operation)
		if err != nil {
			return nil, err
		}
		return findAll(re, text, a.Limit), nil
	case "split":
		sep := "\n"
		if a.Separator != nil {
			sep = *a.Separator
		}
		return split(text, sep, a.Limit), nil
	case "join":
		if a.Parts == nil {
			return nil, missing(a.Operation, "parts")
		}
		sep := ""
		if a.Separator != nil {
			sep = *a.Separator
		}
		return result{Result: strings.Join(a.Parts, sep)}, nil
	case "base64_encode":
		return result{Result: base64.StdEncoding.EncodeToString([]byte(text))}, nil
	case "base64_decode":
		return decodeBase64(text)
	case "hash":
		return result{Result: digest(a.Algorithm, text)}, nil
	case "count":
		return result{Result: map[string]int{
			"characters": utf8.RuneCountInString(text),
			"bytes":      len(text),
			"words":      len(strings.Fields(text)),
			"lines":      lines(text),
		}}, nil
	}
	return nil, registry.Errorf(registry.CodeInvalidArguments, "unknown operation %q", a.Operation)
}

func missing(op, field string) *registry.Error {
	return &registry.Error{Code: registry.CodeInvalidArguments,
		Message:    fmt.Sprintf("operation %s needs %q", op, field),
		Suggestion: fmt.Sprintf("Add %q to the arguments.", field)}
}

func compile(pattern, op string) (*regexp.Regexp, error) {
	if pattern == "" {
		return nil, missing(op, "pattern")
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, &registry.Error{Code: registry.CodeInvalidArguments,
			Message:    "pattern is not a valid RE2 regular expression: " + err.Error(),
			Suggestion: "RE2 has no backreferences or lookaround; escape literal characters like ( and . with a backslash."}
	}
	return re, nil
}

// checkReplacement refuses a regex_replace replacement that would
// silently lose text: Go expands a reference to a group the pattern does
// not have to nothing, and reads the longest run of letters, digits and _
// after $ as the group's name ($1_at_ is the group "1_at_", not $1 then
// "_at_"); and it keeps sed's \1 as text. The references are found as
// regexp.Regexp.Expand finds them.
func checkReplacement(re *regexp.Regexp, repl string) error {
	var bad, fixes []string
	refs := false
	for i := 0; ; {
		j := strings.IndexByte(repl[i:], '$')
		if j < 0 {
			break
		}
		i += j + 1
		if strings.HasPrefix(repl[i:], "$") {
			i++ // $$ is a literal $
			continue
		}
		name, n, braced := refName(repl[i:])
		if n == 0 {
			continue // not a reference: Go keeps the $ as text
		}
		ref := repl[i-1 : i+n]
		i += n
		if hasGroup(re, name) {
			refs = true
			continue
		}
		if _, ok := groupNumber(name); ok {
			bad = append(bad, ref)
		} else {
			bad = append(bad, fmt.Sprintf("%s (a group named %q)", ref, name))
		}
		if braced {
			continue
		}
		// The longest start of the name that is a group is most likely
		// the group meant: $1_at_ meant ${1}_at_ (but $12 need not have
		// meant ${1}2).
		for k := len(name) - 1; k > 0; k-- {
			if isDigit(name[k-1]) && isDigit(name[k]) {
				continue
			}
			if hasGroup(re, name[:k]) {
				fixes = append(fixes, fmt.Sprintf("%s instead of %s", "${"+name[:k]+"}"+name[k:], ref))
				break
			}
		}
	}
	if len(bad) > 0 {
		sug := "Write ${1} or ${name} where a letter, digit or _ follows a group's number or name, and $$ for a literal $"
		if len(fixes) > 0 {
			sug += ": " + strings.Join(firstN(fixes, 5), ", ")
		}
		return &registry.Error{Code: registry.CodeInvalidArguments,
			Message: fmt.Sprintf("replacement refers to %s, which the pattern does not have, so nothing would be put in its place; %s",
				strings.Join(firstN(bad, 5), ", "), groupList(re)),
			Suggestion: sug + "."}
	}
	// sed's \1 is kept as text by Go; where the replacement inserts no
	// group at all, \1 for a group the pattern has is a mistake.
	if refs {
		return nil
	}
	var seds, dollars []string
	for i := 1; i <= 9 && i <= re.NumSubexp(); i++ {
		if strings.Contains(repl, `\`+strconv.Itoa(i)) {
			seds = append(seds, `\`+strconv.Itoa(i))
			dollars = append(dollars, "${"+strconv.Itoa(i)+"}")
		}
	}
	if len(seds) == 0 {
		return nil
	}
	return &registry.Error{Code: registry.CodeInvalidArguments,
		Message: fmt.Sprintf("replacement has %s, which Go's regular expressions keep as text: they refer to groups as $1 or ${1}, so no group would be put in", strings.Join(seds, ", ")),
		Suggestion: fmt.Sprintf("Write %s instead of %s ($1 also works where no letter, digit or _ follows). To keep %s as text, make the group non-capturing: (?:…).",
			strings.Join(dollars, ", "), strings.Join(seds, ", "), seds[0])}
}

// refName reads a group reference after a $ the way regexp.Regexp.Expand
// does: a name of letters, digits and _, or one in braces. It returns the
// name, how many bytes the reference takes (0: it is not one) and whether
// it was in braces.
func refName(s string) (name string, n int, braced bool) {
	if strings.HasPrefix(s, "{") {
		braced, s = true, s[1:]
	}
	end := strings.IndexFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' })
	if end < 0 {
		end = len(s)
	}
	if end == 0 {
		return "", 0, false
	}
	if !braced {
		return s[:end], end, false
	}
	if !strings.HasPrefix(s[end:], "}") {
		return "", 0, false
	}
	return s[:end], end + 2, true
}

// hasGroup says whether name refers to a group of re as Expand reads it:
// a number (no leading zero, at most nine digits) is a group's index,
// anything else a group's name.
func hasGroup(re *regexp.Regexp, name string) bool {
	if n, ok := groupNumber(name); ok {
		return n <= re.NumSubexp()
	}
	return re.SubexpIndex(name) > 0
}

// groupNumber returns the group index name stands for, if it is a number
// as Expand reads one: ASCII digits, no leading zero, at most nine.
func groupNumber(name string) (int, bool) {
	if name == "" || len(name) > 9 || (name[0] == '0' && name != "0") || strings.Trim(name, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(name)
	return n, err == nil
}

// groupList says which references the pattern of re allows.
func groupList(re *regexp.Regexp) string {
	if re.NumSubexp() == 0 {
		return "the pattern has no groups, only $0 (the whole match)"
	}
	var gs []string
	for i, name := range re.SubexpNames()[1:] {
		g := "$" + strconv.Itoa(i+1)
		if name != "" {
			g += " (${" + name + "})"
		}
		gs = append(gs, g)
	}
	return fmt.Sprintf("the pattern has $0 (the whole match) and %s", strings.Join(firstN(gs, 20), ", "))
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "…")
	}
	return s
}

type match struct {
	Match  string   `json:"match"`
	Index  int      `json:"index"`
	Groups []string `json:"groups,omitempty"`
}

// findAll returns the first limit matches of re in text, with a note
// when there are more.
func findAll(re *regexp.Regexp, text string, limit int) result {
	out := []match{}
	locs := re.FindAllStringSubmatchIndex(text, limit+1)
	res := result{}
	if len(locs) > limit {
		locs = locs[:limit]
		res.Note = fmt.Sprintf("stopped at limit: these are the first %d matches, and there are more after the last one (raise limit, at most 10000, or search the text after it)", limit)
	}
	// Characters are counted on from the last match: counting each
	// match's index from the start took time quadratic in the matches.
	at, index := 0, 0
	for _, loc := range locs {
		index += utf8.RuneCountInString(text[at:loc[0]])
		at = loc[0]
		m := match{Match: text[loc[0]:loc[1]], Index: index}
		for g := 2; g+1 < len(loc); g += 2 {
			if loc[g] < 0 {
				m.Groups = append(m.Groups, "")
				continue
			}
			m.Groups = append(m.Groups, text[loc[g]:loc[g+1]])
		}
		out = append(out, m)
	}
	res.Result = out
	return res
}

// split splits text at sep into at most limit parts, with a note when
// the text goes on after them.
func split(text, sep string, limit int) result {
	parts := strings.SplitN(text, sep, limit+1)
	if len(parts) <= limit {
		return result{Result: parts}
	}
	// The last part is the unsplit rest.
	rest := len(text) - len(parts[limit])
	return result{Result: parts[:limit], Note: fmt.Sprintf(
		"stopped at limit: these are the first %d parts, and the text from character %d on was left out (raise limit, at most 10000, or split that rest)",
		limit, utf8.RuneCountInString(text[:rest]))}
}

func decodeBase64(text string) (any, error) {
	s := strings.TrimSpace(text)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		b, err := enc.DecodeString(s)
		if err != nil {
			continue
		}
		if !utf8.Valid(b) {
			return map[string]any{"result": hex.EncodeToString(b), "encoding": "hex", "note": "the decoded bytes are not UTF-8 text, so they are shown as hex"}, nil
		}
		return result{Result: string(b)}, nil
	}
	return nil, &registry.Error{Code: registry.CodeInvalidArguments, Message: "text is not valid base64 (standard or URL alphabet, padded or not)"}
}

func digest(alg, text string) string {
	var h hash.Hash
	switch alg {
	case "md5":
		h = md5.New()
	case "sha1":
		h = sha1.New()
	case "sha512":
		h = sha512.New()
	default:
		h = sha256.New()
	}
	h.Write([]byte(text))
	return hex.EncodeToString(h.Sum(nil))
}

func title(s string) string {
	prev := ' '
	return strings.Map(func(r rune) rune {
		defer func() { prev = r }()
		if unicode.IsSpace(prev) || prev == '-' {
			return unicode.ToTitle(r)
		}
		return unicode.ToLower(r)
	}, s)
}

func lines(s string) int {
	if s == "" {
		return 0
	}
	n := strings.Count(s, "\n")
	if !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}
