package registry

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Code is a stable, documented error code carried by error results.
type Code string

// The error codes of a ToolCallResult. The list is part of the contract:
// api/openapi.yaml and the README document exactly these.
const (
	CodeInvalidArguments Code = "E_INVALID_ARGUMENTS"
	CodeToolNotFound     Code = "E_TOOL_NOT_FOUND"
	CodeToolNotInCatalog Code = "E_TOOL_NOT_IN_CATALOG"
	CodePolicyDenied     Code = "E_POLICY_DENIED"
	CodeApprovalDenied   Code = "E_APPROVAL_DENIED"
	CodeApprovalExpired  Code = "E_APPROVAL_EXPIRED"
	CodeTimeout          Code = "E_TIMEOUT"
	CodeCanceled         Code = "E_CANCELED"
	CodeTool             Code = "E_TOOL"
	CodeInterrupted      Code = "E_INTERRUPTED"
	CodeInternal         Code = "E_INTERNAL"
)

// Codes returns every error code in documentation order.
func Codes() []Code {
	return []Code{
		CodeInvalidArguments, CodeToolNotFound, CodeToolNotInCatalog, CodePolicyDenied,
		CodeApprovalDenied, CodeApprovalExpired, CodeTimeout, CodeCanceled, CodeTool,
		CodeInterrupted, CodeInternal,
	}
}

// Detail is one specific problem with a call, such as a schema violation.
type Detail struct {
	// Path is a JSON pointer into the arguments ("" is the whole object).
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Error is the error member of a ToolCallResult. Tools return it (or wrap
// it) to choose a code and give the model a suggestion; any other error a
// tool returns becomes E_TOOL with the error's text as message.
type Error struct {
	Code       Code     `json:"code"`
	Message    string   `json:"message"`
	Name       string   `json:"name,omitempty"`
	Suggestion string   `json:"suggestion,omitempty"`
	HelpURL    string   `json:"helpUrl,omitempty"`
	Details    []Detail `json:"details,omitempty"`
}

// Error implements error.
func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Errorf returns an *Error with code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ToolError returns an E_TOOL error with a suggestion for the model.
func ToolError(message, suggestion string) *Error {
	return &Error{Code: CodeTool, Message: message, Suggestion: suggestion}
}

// AsError returns err as an *Error, wrapping anything else as E_TOOL.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeTool, Message: err.Error()}
}

// clipMessage bounds an error message to limit characters, keeping its
// beginning (what failed) and its end (where a program's last words, the
// error itself, usually are) around a mark that says how much was left
// out.
func clipMessage(s string, limit int) string {
	n := utf8.RuneCountInString(s)
	if limit <= 0 || n <= limit {
		return s
	}
	mark := fmt.Sprintf(" … [%d characters omitted] … ", n)
	keep := limit - utf8.RuneCountInString(mark)
	if keep < 2 {
		return truncateMessage(s, limit)
	}
	head := keep / 3
	mark = fmt.Sprintf(" … [%d characters omitted] … ", n-keep)
	keep = limit - utf8.RuneCountInString(mark) // fewer digits leave the tail more
	runes := []rune(s)
	return string(runes[:head]) + mark + string(runes[n-(keep-head):])
}

// truncateMessage cuts s to at most limit characters (runes), on a
// character boundary, marking the cut.
func truncateMessage(s string, limit int) string {
	if limit <= 0 || utf8.RuneCountInString(s) <= limit {
		return s
	}
	const mark = "… [truncated]"
	keep := limit - utf8.RuneCountInString(mark)
	if keep < 0 {
		keep = 0
	}
	n := 0
	for i := range s {
		if n == keep {
			return s[:i] + mark
		}
		n++
	}
	return s
}
