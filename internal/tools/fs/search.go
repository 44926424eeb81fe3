package fs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"regexp/syntax"
	"syscall"
	"unicode/utf8"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/tools/rematch"
)

const (
	// maxLineBytes is the longest line searched as one; longer lines are
	// searched in pieces of this size.
	maxLineBytes = 64 << 10
	// maxMatchText is how much of a matching line a match shows.
	maxMatchText = 240
	// sniffBytes is how much of a file decides whether it is binary.
	sniffBytes = 8 << 10
)

type searchArgs struct {
	Pattern    string `json:"pattern"`
	Path       string `json:"path"`
	Glob       string `json:"glob"`
	IgnoreCase bool   `json:"ignoreCase"`
	MaxMatches int    `json:"maxMatches"`
}

// Match is one matching line.
type Match struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	// Column is the 1-based byte offset of the match in the line.
	Column int    `json:"column"`
	Text   string `json:"text"`
}

type searchResult struct {
	Matches      []Match `json:"matches"`
	MatchCount   int     `json:"matchCount"`
	FilesScanned int     `json:"filesScanned"`
	BytesScanned int64   `json:"bytesScanned"`
	Truncated    bool    `json:"truncated"`
	// Reason says which limit ended the search.
	Reason string `json:"reason,omitempty"`
}

func (t *tools) searchTool() *registry.Tool {
	desc := fmt.Sprintf(`Search the contents of workspace files for a regular expression (Go RE2 syntax: no look-around or back-references; use ignoreCase or "(?i)" for case-insensitive matching) and return the matching lines as {path, line, column, text}, in path order. %s
Searches the files under path (default the whole workspace), optionally only those matching glob; binary files, symbolic links and files it may not open are skipped (a path naming one such file fails, saying why). Returns at most %d matches, one per line (its first), and reads at most %d bytes of content; lines longer than %d bytes are shown cut around the match. A line longer than 64 KiB (or, for a very complex pattern, a smaller piece) is searched in pieces, and a match across two pieces is not found. truncated and reason say when a limit ended the search — then narrow it with a deeper path, a glob or a more specific pattern.`,
		pathRules, t.o.MaxSearchMatches, t.o.MaxSearchBytes, maxMatchText)
	schema := fmt.Sprintf(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["pattern"],
  "properties": {
    "pattern": {"type": "string", "minLength": 1, "maxLength": 1000, "description": "Regular expression (Go RE2 syntax) to look for in each line, e.g. \"func \\w+\\(\" or \"TODO|FIXME\"."},
    "path": %s,
    "glob": {"type": "string", "maxLength": 512, "description": %q},
    "ignoreCase": {"type": "boolean", "default": false, "description": "Match letters regardless of case."},
    "maxMatches": {"type": "integer", "minimum": 1, "maximum": %d, "description": "Most matches to return (default and maximum %d)."}
  }
}`, pathSchema(`Directory (or single file) to search, relative to the workspace root; default "." (everything).`), globDescription, t.o.MaxSearchMatches, t.o.MaxSearchMatches)
	return t.define("search", desc, registry.ReadOnly, schema, readOnly(), t.search)
}

func (t *tools) search(ctx context.Context, req *registry.Request) (any, error) {
	var a searchArgs
	if err := req.Bind(&a); err != nil {
		return nil, err
	}
	rel, err := cleanPath("path", a.Path, true)
	if err != nil {
		return nil, err
	}
	expr := a.Pattern
	if a.IgnoreCase {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, &registry.Error{Code: registry.CodeInvalidArguments,
			Message:    fmt.Sprintf("pattern %s is not a valid regular expression: %v", quoteShort(a.Pattern), unwrapRegexp(err)),
			Suggestion: `Use Go RE2 syntax: no look-around or back-references; escape special characters such as ( [ . * + ? with a backslash.`}
	}
	insts := rematch.ProgramSize(expr)
	if insts > rematch.MaxInsts {
		return nil, &registry.Error{Code: registry.CodeInvalidArguments,
			Message:    fmt.Sprintf("pattern %s compiles to %d instructions; the limit is %d", quoteShort(a.Pattern), insts, rematch.MaxInsts),
			Suggestion: "Use smaller repetition counts (x{1000} repeats x a thousand times) or a simpler pattern."}
	}
	glob, err := newGlob(a.Glob)
	if err != nil {
		return nil, err
	}
	s := &searcher{
		ctx:      ctx,
		res:      searchResult{Matches: []Match{}},
		maxMatch: t.o.MaxSearchMatches,
		left:     t.o.MaxSearchBytes,
		budget:   outputBudget(req, 0),
		match:    rematch.New(ctx, re, insts, maxLineBytes),
	}
	if a.MaxMatches > 0 && a.MaxMatches < s.maxMatch {
		s.maxMatch = a.MaxMatches
	}
	wd, err := t.peekDir(req)
	if err != nil {
		return nil, err
	}
	defer wd.Close()
	root := wd.Root
	if err := mustBeDir(root, a.Path, rel); err != nil {
		return nil, err
	}
	s.root = root

	fi, err := root.Stat(rel)
	if err != nil {
		return nil, pathError(root, rel, err)
	}
	if !fi.IsDir() {
		// A search of one file that cannot be searched says why, where a
		// search of a directory skips it.
		if !fi.Mode().IsRegular() {
			return nil, notRegular(rel, fi.Mode(), "fs__search searches regular files; name a text file or a directory.")
		}
		s.one = true
		if err := s.file(rel); err != nil && !errors.Is(err, errStop) {
			return nil, err
		}
		s.finish()
		return s.res, nil
	}
	w := &walker{ctx: ctx, root: root, limit: t.o.MaxScanEntries}
	err = w.walk(rel, true, func(e entry) error {
		if !e.d.Type().IsRegular() || !glob.match(e) {
			return nil
		}
		return s.file(e.rel)
	})
	if err != nil {
		return nil, err
	}
	if w.full && !s.res.Truncated {
		s.res.Truncated, s.res.Reason = true, fmt.Sprintf("looked at %d directory entries without finishing; search a deeper path", t.o.MaxScanEntries)
	}
	if w.deep > 0 && !s.res.Truncated {
		s.res.Truncated, s.res.Reason = true, fmt.Sprintf("%d directories %d levels below %s were not searched; search one of them as path to see inside it", w.deep, maxWalkDepth, quoteShort(rel))
	}
	s.finish()
	return s.res, nil
}

// finish counts the matches and adds to the reason what was left out
// for being too long to return.
func (s *searcher) finish() {
	s.res.MatchCount = len(s.res.Matches)
	if s.tooLong == 0 {
		return
	}
	reason := fmt.Sprintf("%d matching lines were left out: each is in a file whose path is longer than the %d bytes a path may have, or is alone more than the output limit", s.tooLong, MaxPathBytes)
	if s.res.Truncated {
		reason = s.res.Reason + "; " + reason
	}
	s.res.Truncated, s.res.Reason = true, reason
}

func unwrapRegexp(err error) error {
	var re *syntax.Error
	if errors.As(err, &re) {
		return re
	}
	return err
}

// searcher holds the state of one search.
type searcher struct {
	ctx      context.Context
	root     *os.Root
	res      searchResult
	maxMatch int
	left     int64 // content bytes still allowed
	budget   int   // output bytes still allowed; -1 is unbounded
	used     int
	br       *bufio.Reader // reused from file to file
	// match finds the pattern in a line, in pieces of bounded work.
	match *rematch.Matcher
	// one says the search is of one file, which fails with the reason
	// when the file cannot be searched.
	one bool
	// tooLong counts the matches left out because no output could hold
	// them (their path is longer than MaxPathBytes, or the match alone
	// is longer than the output budget).
	tooLong int
}

func (s *searcher) stop(reason string) error {
	s.res.Truncated, s.res.Reason = true, reason
	return errStop
}

// skip is the answer for a file that cannot be searched: nil, as a search
// of a directory is best effort over what it can read, but err when the
// search is of that one file.
func (s *searcher) skip(err error) error {
	if s.one {
		return err
	}
	return nil
}

// file searches one file; a file that cannot be opened, is not a regular
// file or is binary is skipped.
func (s *searcher) file(rel string) error {
	if err := s.ctx.Err(); err != nil {
		return err
	}
	if s.left <= 0 {
		return s.stop("content byte limit reached; search a deeper path or use a glob")
	}
	f, err := s.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return s.skip(openError(s.root, rel, err, "fs__search searches regular files; name a text file or a directory."))
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return s.skip(fileError(rel, err))
	} else if !fi.Mode().IsRegular() {
		return s.skip(notRegular(rel, fi.Mode(), "fs__search searches regular files; name a text file or a directory."))
	}
	counter := &countingReader{r: io.LimitReader(f, s.left)}
	if s.br == nil {
		s.br = bufio.NewReaderSize(counter, maxLineBytes)
	} else {
		s.br.Reset(counter)
	}
	br := s.br
	defer func() {
		s.left -= counter.n
		s.res.BytesScanned += counter.n
	}()
	if head, _ := br.Peek(sniffBytes); bytes.IndexByte(head, 0) >= 0 {
		return s.skip(registry.ToolError(
			fmt.Sprintf("%s is a binary file (it holds NUL bytes in its first %d bytes), and fs__search searches text only", quoteShort(rel), sniffBytes),
			"Use fs__read, which returns a binary file's bytes base64-encoded."))
	}
	s.res.FilesScanned++
	line, reads := 0, 0
	// A line longer than the reader's buffer comes in chunks: inLine is
	// where the chunk begins in its line, and found says the line has
	// matched already (a line is one match, at its first).
	continued, inLine, found := false, 0, false
	for {
		reads++
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			if !continued {
				line, inLine, found = line+1, 0, false
			}
			part := rematch.End
			if !continued {
				part |= rematch.Start
			}
			text := chunk
			if err == bufio.ErrBufferFull {
				part &^= rematch.End
			} else {
				text = bytes.TrimRight(chunk, "\r\n")
			}
			if !found {
				at, err := s.match.Find(text, part)
				if err != nil {
					return err
				}
				if at >= 0 {
					found = true
					if err := s.add(Match{Path: rel, Line: line, Column: inLine + at + 1, Text: excerpt(text, at, continued, part&rematch.End == 0)}); err != nil {
						return err
					}
				}
			}
			inLine += len(chunk)
		}
		continued = err == bufio.ErrBufferFull
		if err == io.EOF {
			break
		}
		if err != nil && err != bufio.ErrBufferFull {
			return nil
		}
		if reads%1024 == 0 {
			if err := s.ctx.Err(); err != nil {
				return err
			}
		}
	}
	if counter.n >= s.left {
		if fi, err := f.Stat(); err == nil && fi.Size() > counter.n {
			return s.stop(fmt.Sprintf("content byte limit reached in %s; search a deeper path or use a glob", quoteShort(rel)))
		}
	}
	return nil
}

// add takes one match, unless no output could hold it.
func (s *searcher) add(m Match) error {
	if len(s.res.Matches) >= s.maxMatch {
		return s.stop(fmt.Sprintf("more than %d matches; use a more specific pattern, path or glob", s.maxMatch))
	}
	if len(m.Path) > MaxPathBytes {
		// No tool could take the path back.
		s.tooLong++
		return nil
	}
	if s.budget >= 0 {
		n := jsonLen(m) + 1
		if n > s.budget {
			s.tooLong++
			return nil
		}
		s.used += n
		if s.used > s.budget {
			return s.stop("output limit reached; use a more specific pattern, path or glob")
		}
	}
	s.res.Matches = append(s.res.Matches, m)
	return nil
}

// excerpt returns up to maxMatchText bytes of line, as valid UTF-8, that
// show the match starting at at; line is a part of a longer line that
// goes on before it (before) or after it (after).
func excerpt(line []byte, at int, before, after bool) string {
	start := 0
	if len(line) > maxMatchText && at > maxMatchText/4 {
		start = at - maxMatchText/4
		for start < at && !utf8.RuneStart(line[start]) {
			start++
		}
	}
	end := min(len(line), start+maxMatchText)
	for end > start && end < len(line) && !utf8.RuneStart(line[end]) {
		end--
	}
	s := string(bytes.ToValidUTF8(line[start:end], []byte("\uFFFD")))
	if start > 0 || before {
		s = "…" + s
	}
	if end < len(line) || after {
		s += "…"
	}
	return s
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
