package http

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/logtest"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// auditKeys are the attributes of an audit line, less its time.
func auditKeys(m map[string]any) []string {
	var ks []string
	for k := range m {
		if k != "time" {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

// toolCallLines returns the "tool call" audit lines of toolCallID.
func toolCallLines(t *testing.T, logs *logtest.Buffer, toolCallID string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, m := range logLines(t, logs) {
		if m["msg"] == "tool call" && m["toolCallId"] == toolCallID {
			out = append(out, m)
		}
	}
	return out
}

// TestAuditSettled: the audit line of a call an approval request ended
// without running it (AuditSettled, written by whoever moved the request)
// is the call's, as its run's would be: the caller that filed it, the
// request's tool, tier, rule and digest, the request id of the context,
// and the outcome: decision deny and E_APPROVAL_DENIED for a denial,
// decision ask and E_APPROVAL_EXPIRED for a request nobody decided.
// Nothing is written for a request still pending, or approved (its run
// writes the line).
func TestAuditSettled(t *testing.T) {
	for _, c := range []struct {
		name   string
		settle func(ctx context.Context, st registry.Store, id string) error
		effect registry.Effect
		code   registry.Code
	}{
		{"denied", func(ctx context.Context, st registry.Store, id string) error {
			_, _, err := st.DecideApproval(ctx, id, registry.VerdictDeny, "oncall", "not now", time.Now())
			return err
		}, registry.Deny, registry.CodeApprovalDenied},
		{"expired", func(ctx context.Context, st registry.Store, id string) error {
			_, err := st.ExpireApprovals(ctx, time.Now().Add(24*time.Hour))
			return err
		}, registry.Ask, registry.CodeApprovalExpired},
		{"approved", func(ctx context.Context, st registry.Store, id string) error {
			_, _, err := st.DecideApproval(ctx, id, registry.VerdictApprove, "oncall", "", time.Now())
			return err
		}, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, logs := infoEnv(t, func(d *Deps, o *registry.Options) { o.Store = openStore(t) })
			exec := e.srv.deps.Executor.(*registry.Executor)
			st := exec.Store()
			id := e.askApproval("settled")
			a, err := st.GetApproval(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			exec.AuditSettled(t.Context(), a) // pending: nothing
			if err := c.settle(t.Context(), st, id); err != nil {
				t.Fatal(err)
			}
			if a, err = st.GetApproval(t.Context(), id); err != nil {
				t.Fatal(err)
			}
			exec.AuditSettled(registry.WithRequestID(t.Context(), "req-settled"), a)
			lines := toolCallLines(t, logs, "settled")
			if c.code == "" {
				if len(lines) != 1 {
					t.Errorf("audit lines of the %s call: %v; want only its filing's", c.name, lines)
				}
				return
			}
			if len(lines) != 2 {
				t.Fatalf("audit lines of the %s call: %v; want its filing's and one more", c.name, lines)
			}
			filed, line := lines[0], lines[1]
			want := map[string]any{"level": "INFO", "caller": "anonymous", "tool": "test__priv", "tier": string(registry.Privileged),
				"decision": string(c.effect), "rule": filed["rule"], "status": string(registry.StatusError), "code": string(c.code),
				"argumentsDigest": filed["argumentsDigest"], "requestId": "req-settled"}
			for k, v := range want {
				if line[k] != v {
					t.Errorf("the %s call's audit line has %s %v, want %v: %v", c.name, k, line[k], v, line)
				}
			}
			if !slices.Equal(auditKeys(line), auditKeys(filed)) {
				t.Errorf("the %s call's audit line has %v, its filing's %v", c.name, auditKeys(line), auditKeys(filed))
			}
		})
	}
}
