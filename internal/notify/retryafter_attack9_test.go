package notify

import (
	"net/http"
	"testing"
	"time"
)

// TestRetryAfterParsing: Retry-After in seconds or as an HTTP date is a
// wait from now, at most maxBackoff; what is not one is no wait.
func TestRetryAfterParsing(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		header string
		want   time.Duration
	}{
		{"", 0},
		{"30", 30 * time.Second},
		{" 2 ", 2 * time.Second},
		{"0", 0},
		{"3600", maxBackoff},
		{"99999999999999999999999", maxBackoff},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{now.Add(24 * time.Hour).Format(http.TimeFormat), maxBackoff},
		{"-5", 0},
		{"soon", 0},
	} {
		if got := retryAfter(tc.header, now); got != tc.want {
			t.Errorf("Retry-After %q: %s, want %s", tc.header, got, tc.want)
		}
	}
}
