package main

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
	"github.com/toolsvc/toolsvc/internal/store/storetest"
)

// result is the part of a ToolCallResult the tests look at.
type result struct {
	ToolCallID string          `json:"toolCallId"`
	Status     string          `json:"status"`
	Output     json.RawMessage `json:"output"`
	Error      *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	DurationMs int64 `json:"durationMs"`
	Approval   *struct {
		ID              string `json:"id"`
		ArgumentsDigest string `json:"argumentsDigest"`
	} `json:"approval"`
	Code string `json:"code"` // of a problem
}

func (r result) code() string {
	if r.Error != nil {
		return r.Error.Code
	}
	return ""
}

func (in *instance) do(method, path, body string) (int, result) {
	in.t.Helper()
	return in.as("", method, path, body)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// TestConcurrentRepeatsRunOnce: 20 identical calls with one toolCallId to a
// side-effecting tool append once; the same id with other arguments is 409.
func TestConcurrentRepeatsRunOnce(t *testing.T) {
	ws := t.TempDir()
	in := start(t, "TOOLSVC_WORKSPACE="+ws)
	call := `{"toolCallId":"append-1","toolName":"fs__write","arguments":{"path":"log.txt","content":"x\n","mode":"append"}}`
	var wg sync.WaitGroup
	results := make([]result, 20)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, r := in.do("POST", "/calls", call)
			if status != 200 {
				t.Errorf("call %d: %d %+v", i, status, r)
			}
			results[i] = r
		}()
	}
	wg.Wait()
	if got := readFile(t, filepath.Join(ws, "callers/anonymous/default", "log.txt")); got != "x\n" {
		t.Fatalf("20 repeats appended %q, want one line", got)
	}
	for i, r := range results {
		if r.Status != "ok" || string(r.Output) != string(results[0].Output) {
			t.Errorf("call %d got %+v, want the first result %+v", i, r, results[0])
		}
	}
	status, r := in.do("POST", "/calls", strings.Replace(call, `"x\n"`, `"y\n"`, 1))
	if status != 409 || r.Code != "conflict" {
		t.Errorf("same id, other arguments: %d %+v", status, r)
	}
	// The same call in another instance writes another file: answering it
	// with the first one's result would say a write happened that did not.
	status, r = in.do("POST", "/calls", strings.Replace(call, `"toolName"`, `"context":{"instanceKey":"conv-2"},"toolName"`, 1))
	if status != 409 || r.Code != "conflict" {
		t.Errorf("same id and arguments in another instance: %d %+v", status, r)
	}
	if _, err := os.Stat(filepath.Join(ws, "callers/anonymous/conv-2", "log.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused call wrote in its instance: %v", err)
	}
	if status, r := in.do("GET", "/calls/append-1", ""); status != 200 || r.Status != "ok" {
		t.Errorf("GET /calls/append-1: %d %+v", status, r)
	}
	if status, _ := in.do("GET", "/calls/never", ""); status != 404 {
		t.Errorf("GET /calls/never: %d", status)
	}
	// read_only calls are recorded only on request.
	in.do("POST", "/calls", `{"toolCallId":"ro-1","toolName":"fs__stat","arguments":{"path":"log.txt"}}`)
	if status, _ := in.do("GET", "/calls/ro-1", ""); status != 404 {
		t.Errorf("unrecorded read_only call is stored: %d", status)
	}
	in.do("POST", "/calls", `{"toolCallId":"ro-2","toolName":"fs__stat","arguments":{"path":"log.txt"},"record":true}`)
	if status, r := in.do("GET", "/calls/ro-2", ""); status != 200 || r.Status != "ok" {
		t.Errorf("recorded read_only call: %d %+v", status, r)
	}
}

// TestRestartRunsNothingTwice: a result survives a restart, and a call
// left running by a crash becomes E_INTERRUPTED instead of running again.
func TestRestartRunsNothingTwice(t *testing.T) {
	ws, data := t.TempDir(), t.TempDir()
	env := []string{"TOOLSVC_WORKSPACE=" + ws, "TOOLSVC_DATA_DIR=" + data}
	call := `{"toolCallId":"a1","toolName":"fs__write","arguments":{"path":"log.txt","content":"once\n","mode":"append"}}`

	first := start(t, env...)
	_, r1 := first.do("POST", "/calls", call)
	first.cancel()
	<-first.done
	first.done <- nil

	// A crash while a call runs: its record stays running.
	s, err := sqlite.Open(context.Background(), filepath.Join(data, "toolsvc.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var args any
	crashArgs := `{"path":"log.txt","content":"crash\n","mode":"append"}`
	_ = json.Unmarshal([]byte(crashArgs), &args)
	if _, created, err := s.BeginCall(context.Background(), &registry.CallRecord{
		CallerID: "anonymous", ToolCallID: "crash-1", ToolName: "fs__write", ArgumentsDigest: registry.ArgumentsDigest(args),
		Arguments: json.RawMessage(crashArgs), State: registry.CallRunning,
	}); err != nil || !created {
		t.Fatalf("BeginCall: %v %v", created, err)
	}
	s.Close()

	second := start(t, env...)
	status, r2 := second.do("POST", "/calls", call)
	if status != 200 || r2.Status != "ok" || string(r2.Output) != string(r1.Output) || r2.DurationMs != r1.DurationMs {
		t.Errorf("repeat after restart: %d %+v, want the stored %+v", status, r2, r1)
	}
	status, r3 := second.do("POST", "/calls", `{"toolCallId":"crash-1","toolName":"fs__write","arguments":`+crashArgs+`}`)
	if status != 200 || r3.code() != "E_INTERRUPTED" {
		t.Errorf("retry of the interrupted call: %d %+v", status, r3)
	}
	if got := readFile(t, filepath.Join(ws, "callers/anonymous/default", "log.txt")); got != "once\n" {
		t.Errorf("log.txt = %q, want one line: nothing ran twice", got)
	}
}

// TestApprovalFlow: a privileged call waits for approval; approving runs
// it once (even when approvers race), denying and expiry end it.
func TestApprovalFlow(t *testing.T) {
	ws := t.TempDir()
	in := start(t, "TOOLSVC_WORKSPACE="+ws, "TOOLSVC_APPROVAL_TTL=2s")
	call := `{"toolCallId":"ask-1","toolName":"shell__exec","arguments":{"command":"echo ran >> count.txt; echo done"}}`
	status, p := in.do("POST", "/calls", call)
	if status != 202 || p.Status != "pending_approval" || p.Approval == nil {
		t.Fatalf("privileged call: %d %+v", status, p)
	}
	if status, r := in.do("POST", "/calls", call); status != 202 || r.Approval == nil || r.Approval.ID != p.Approval.ID {
		t.Errorf("repeat while pending: %d %+v", status, r)
	}
	if status, r := in.do("POST", "/calls", strings.Replace(call, "echo done", "echo tampered", 1)); status != 409 {
		t.Errorf("tampered repeat: %d %+v", status, r)
	}
	resp, err := http.Get(in.base + "/approvals")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Approvals []registry.Approval `json:"approvals"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if len(list.Approvals) != 1 || list.Approvals[0].ID != p.Approval.ID || list.Approvals[0].ToolName != "shell__exec" || !strings.Contains(string(list.Approvals[0].Arguments), "count.txt") {
		t.Fatalf("GET /approvals: %+v", list)
	}
	if status, r := in.do("GET", "/calls/ask-1", ""); status != 202 || r.Status != "pending_approval" {
		t.Errorf("GET /calls while pending: %d %+v", status, r)
	}
	// Ten approvers race; the call runs once and all see its result.
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, r := in.do("POST", "/approvals/"+p.Approval.ID, `{"decision":"approve","reason":"ok"}`)
			if status != 200 || r.Status != "ok" || !strings.Contains(string(r.Output), "done") {
				t.Errorf("approver %d: %d %+v", i, status, r)
			}
		}()
	}
	wg.Wait()
	if got := readFile(t, filepath.Join(ws, "callers/anonymous/default", "count.txt")); got != "ran\n" {
		t.Errorf("count.txt = %q: the approved call ran %d times", got, strings.Count(got, "ran"))
	}
	if status, r := in.do("GET", "/calls/ask-1?wait=1s", ""); status != 200 || r.Status != "ok" {
		t.Errorf("GET /calls after approval: %d %+v", status, r)
	}
	if status, r := in.do("POST", "/calls", call); status != 200 || r.Status != "ok" {
		t.Errorf("repeat after approval: %d %+v", status, r)
	}
	if got := readFile(t, filepath.Join(ws, "callers/anonymous/default", "count.txt")); got != "ran\n" {
		t.Errorf("a repeat ran the call again: %q", got)
	}

	// Deny.
	_, p2 := in.do("POST", "/calls", `{"toolCallId":"ask-2","toolName":"shell__exec","arguments":{"command":"echo no >> count.txt"}}`)
	if status, r := in.do("POST", "/approvals/"+p2.Approval.ID, `{"decision":"deny","reason":"not today"}`); status != 200 || r.code() != "E_APPROVAL_DENIED" || !strings.Contains(r.Error.Message, "not today") {
		t.Errorf("deny: %d %+v", status, r)
	}
	if status, r := in.do("POST", "/approvals/"+p2.Approval.ID, `{"decision":"approve"}`); status != 200 || r.code() != "E_APPROVAL_DENIED" {
		t.Errorf("approve after deny: %d %+v", status, r)
	}
	// Expire.
	_, p3 := in.do("POST", "/calls", `{"toolCallId":"ask-3","toolName":"shell__exec","arguments":{"command":"echo late >> count.txt"}}`)
	time.Sleep(2100 * time.Millisecond)
	if status, r := in.do("GET", "/calls/ask-3", ""); status != 200 || r.code() != "E_APPROVAL_EXPIRED" {
		t.Errorf("expired: %d %+v", status, r)
	}
	if status, r := in.do("POST", "/approvals/"+p3.Approval.ID, `{"decision":"approve"}`); r.code() != "E_APPROVAL_EXPIRED" {
		t.Errorf("approve after expiry: %d %+v", status, r)
	}
	if got := readFile(t, filepath.Join(ws, "callers/anonymous/default", "count.txt")); got != "ran\n" {
		t.Errorf("denied or expired calls ran: %q", got)
	}
	for _, bad := range []string{`{"decision":"maybe"}`, `{"verdict":"approve"}`, `nope`} {
		if status, _ := in.do("POST", "/approvals/"+p3.Approval.ID, bad); status != 400 {
			t.Errorf("decision %s: %d", bad, status)
		}
	}
	if status, _ := in.do("POST", "/approvals/apr_nope", `{"decision":"approve"}`); status != 404 {
		t.Errorf("unknown approval: %d", status)
	}
}

// TestReplicasShareState: two instances on one PostgreSQL: an approval
// filed on one and approved concurrently on both runs once; a repeat on the
// other instance returns the stored result.
func TestReplicasShareState(t *testing.T) {
	url := os.Getenv("TOOLSVC_TEST_POSTGRES_URL")
	if url == "" {
		t.Skip("TOOLSVC_TEST_POSTGRES_URL is not set; skipping the multi-replica test (CI sets it)")
	}
	schema := storetest.PostgresSchema(t, url)
	ws := t.TempDir()
	env := []string{"TOOLSVC_WORKSPACE=" + ws, "TOOLSVC_STORE_URL=" + url, "TOOLSVC_STORE_SCHEMA=" + schema}
	a, b2 := start(t, env...), start(t, env...)

	_, p := a.do("POST", "/calls", `{"toolCallId":"shared-1","toolName":"shell__exec","arguments":{"command":"echo ran >> count.txt; echo done"}}`)
	if p.Approval == nil {
		t.Fatalf("no approval: %+v", p)
	}
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := a
			if i%2 == 1 {
				in = b2
			}
			status, r := in.do("POST", "/approvals/"+p.Approval.ID, `{"decision":"approve"}`)
			if status != 200 || r.Status != "ok" {
				t.Errorf("approver %d: %d %+v", i, status, r)
			}
		}()
	}
	wg.Wait()
	if got := readFile(t, filepath.Join(ws, "callers/anonymous/default", "count.txt")); got != "ran\n" {
		t.Errorf("count.txt = %q: the approved call ran %d times across replicas", got, strings.Count(got, "ran"))
	}
	call := `{"toolCallId":"w-1","toolName":"fs__write","arguments":{"path":"w.txt","content":"w\n","mode":"append"}}`
	_, r1 := a.do("POST", "/calls", call)
	status, r2 := b2.do("POST", "/calls", call)
	if status != 200 || r2.Status != "ok" || r2.DurationMs != r1.DurationMs || string(r2.Output) != string(r1.Output) {
		t.Errorf("repeat on the other replica: %d %+v, want %+v", status, r2, r1)
	}
	if got := readFile(t, filepath.Join(ws, "callers/anonymous/default", "w.txt")); got != "w\n" {
		t.Errorf("w.txt = %q", got)
	}
	if status, r := b2.do("GET", "/calls/shared-1", ""); status != 200 || r.Status != "ok" {
		t.Errorf("GET on the other replica: %d %+v", status, r)
	}
}
