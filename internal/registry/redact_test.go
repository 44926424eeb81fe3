package registry

import "testing"

func TestRedactURLs(t *testing.T) {
	cases := []struct{ in, want string }{
		{"https://mcp.example.com/mcp?api_key=s3cret", "https://mcp.example.com/mcp?REDACTED"},
		{"http://user:pw@host:8080/p/a?x=1#frag", "http://REDACTED@host:8080/p/a?REDACTED"},
		{"http://host/path", "http://host/path"},
		{`Post "http://127.0.0.1:1/mcp?api_key=s3cret": dial tcp: refused`, `Post "http://127.0.0.1:1/mcp?REDACTED": dial tcp: refused`},
		{"a http://u@h/x?k=v and https://h2/?t=1 end", "a http://REDACTED@h/x?REDACTED and https://h2/?REDACTED end"},
		{"no url here: just text", "no url here: just text"},
		{"weird://?token=1", "weird://REDACTED"},
	}
	for _, c := range cases {
		if got := RedactURLs(c.in); got != c.want {
			t.Errorf("RedactURLs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
