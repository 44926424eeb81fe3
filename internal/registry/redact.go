package registry

import (
	"net/url"
	"regexp"
	"strings"
)

// urlInText finds URLs in free text: a scheme, "://", and everything up to
// white space or a quote (Go's errors quote the URL they name).
var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>` + "`" + `]+`)

// RedactURL returns u without the parts that carry secrets: user
// information and the query (an api_key=… parameter) become REDACTED and
// the fragment is dropped; scheme, host and path stay, so the URL still
// says where it points.
func RedactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" && p.User == nil {
		// Not parseable as a URL with a host: keep at most the part
		// before anything that could be user information or a query.
		if i := strings.IndexAny(u, "@?#"); i >= 0 {
			return u[:i] + "REDACTED"
		}
		return u
	}
	var b strings.Builder
	b.WriteString(p.Scheme)
	b.WriteString("://")
	if p.User != nil {
		b.WriteString("REDACTED@")
	}
	b.WriteString(p.Host)
	b.WriteString(p.EscapedPath())
	if p.RawQuery != "" || p.ForceQuery {
		b.WriteString("?REDACTED")
	}
	return b.String()
}

// RedactURLs returns text with every URL in it passed through RedactURL,
// for error messages and log lines that may quote a configured URL.
func RedactURLs(text string) string {
	if !strings.Contains(text, "://") {
		return text
	}
	return urlInText.ReplaceAllStringFunc(text, RedactURL)
}
