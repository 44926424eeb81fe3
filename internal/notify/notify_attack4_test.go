package notify_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/logtest"
	"github.com/toolsvc/toolsvc/internal/notify"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestFailedDeliveryDoesNotLogTheURL delivers to a Slack-style webhook
// whose URL (from urlFrom, a secret: the token is its path) answers
// nothing: the failure is logged with its cause, without the URL, which
// the transport's error quoted in full.
func TestFailedDeliveryDoesNotLogTheURL(t *testing.T) {
	const token = "T0001/B0002/SlackWebhookToken"
	hook := "http://" + closedAddr(t) + "/services/" + token
	tg, err := notify.Decode("oncall", notify.Spec{Type: "slack", URLFrom: &notify.EnvRef{Env: "SLACK_URL"}, MaxAttempts: 1},
		func(name string) (string, bool) { return hook, name == "SLACK_URL" })
	if err != nil {
		t.Fatal(err)
	}
	var logs logtest.Buffer
	d := notify.New(notify.Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	defer d.Close()
	d.Load([]*notify.Target{tg})
	d.ObserveApproval(registry.ApprovalEvent{Kind: registry.EventApprovalRequested, Approval: registry.Approval{ID: "apr_1", ToolName: "ops__restart"}})
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "notify: delivery failed") {
		if time.Now().After(deadline) {
			t.Fatalf("the delivery was not given up within 10s: %s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	out := logs.String()
	if !strings.Contains(out, "connection refused") {
		t.Errorf("the cause of the failure is not logged: %s", out)
	}
	if strings.Contains(out, "SlackWebhookToken") || strings.Contains(out, "/services/") {
		t.Errorf("the webhook's secret URL is logged: %s", out)
	}
}
