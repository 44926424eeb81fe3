package httpfetch

import "testing"

func TestNormalizeURL(t *testing.T) {
	for in, want := range map[string]string{
		"HTTP://Example.COM/A?b=C#d":     "http://example.com/A?b=C#d",
		"Https://EXAMPLE.com:8443/x":     "https://example.com:8443/x",
		"http://example.com/%7Euser":     "http://example.com/%7Euser",
		"http://example.com/a b":         "http://example.com/a%20b",
		"https://example.com/":           "https://example.com/",
		"http://[::FFFF:7F00:1]/":        "http://[::ffff:7f00:1]/",
		"not a url\x7f":                  "not a url\x7f",
		"https://user:Pass@Example.com/": "https://user:Pass@example.com/",
	} {
		args := map[string]any{"url": in}
		changed := normalizeURL(args)
		if got := args["url"]; got != want || changed != (want != in) {
			t.Errorf("%q: %q (changed %v), want %q", in, got, changed, want)
		}
	}
}
