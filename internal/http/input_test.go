package http

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// A native call with a member toolsvc does not know is refused with the
// member and the one probably meant; model-shaped bodies keep their
// providers' own extra members.
func TestUnknownMembers(t *testing.T) {
	e := newEnv(t)
	refused := []struct {
		name, body, member, want string
	}{
		{"args", `{"toolName":"text__transform","args":{"operation":"upper","text":"a"}}`, `"args"`, `"arguments"`},
		{"misspelt", `{"toolName":"text__transform","argumnets":{}}`, `"argumnets"`, `"arguments"`},
		{"tool name", `{"tool":"text__transform","arguments":{}}`, `"tool"`, `"toolName"`},
		{"model member in a native call", `{"toolName":"text__transform","id":"c1","arguments":{}}`, `"id"`, `"toolCallId"`},
		{"nested", `{"toolName":"text__transform","context":{"instanceKye":"a"}}`, `"instanceKye"`, `"instanceKey"`},
		{"nothing close", `{"toolName":"text__transform","zzzzzzzz":1}`, `"zzzzzzzz"`, "toolCallId, toolName, arguments"},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			r := e.do("POST", "/calls", []byte(c.body), jsonCT, false)
			var p Problem
			r.json(t, &p)
			if r.status != 400 || p.Code != "unknown_member" || !strings.Contains(p.Detail, c.member) || !strings.Contains(p.Detail, c.want) {
				t.Errorf("got %d %s; want 400 unknown_member naming %s and %s", r.status, r.body, c.member, c.want)
			}
		})
	}
	accepted := []struct{ name, body string }{
		{"native", `{"toolName":"text__transform","arguments":{"operation":"upper","text":"a"},"context":{"instanceKey":"k"},"record":false}`},
		{"openai with extras", `{"id":"c1","type":"function","index":0,"function":{"name":"text__transform","arguments":"{\"operation\":\"upper\",\"text\":\"a\"}"}}`},
		{"responses item with status", `{"type":"function_call","id":"fc_1","call_id":"c2","status":"completed","name":"text__transform","arguments":"{\"operation\":\"upper\",\"text\":\"a\"}"}`},
		{"anthropic with cache_control", `{"type":"tool_use","id":"toolu_1","name":"text__transform","input":{"operation":"upper","text":"a"},"cache_control":{"type":"ephemeral"}}`},
		{"gemini with thoughtSignature", `{"functionCall":{"id":"g1","name":"text__transform","args":{"operation":"upper","text":"a"}},"thoughtSignature":"abc"}`},
	}
	for _, c := range accepted {
		t.Run(c.name, func(t *testing.T) {
			r, res := e.call("/calls", c.body)
			if r.status != 200 || res.Status != registry.StatusOK || string(res.Output) != `{"result":"A"}` {
				t.Errorf("got %d %s", r.status, r.body)
			}
		})
	}
	// In a batch, the unreadable call is an error in its own slot.
	r := e.do("POST", "/calls/batch", []byte(`{"calls":[{"toolName":"text__transform","args":{}}]}`), jsonCT, true)
	var b struct{ Results []registry.Result }
	r.json(t, &b)
	if r.status != 200 || len(b.Results) != 1 || b.Results[0].Code() != registry.CodeInvalidArguments || !strings.Contains(b.Results[0].Error.Message, `did you mean "arguments"`) {
		t.Errorf("batch: %d %s", r.status, r.body)
	}
}

func TestProblemKinds(t *testing.T) {
	c := loadContract(t)
	var documented []string
	for _, v := range c.doc.Components.Schemas["Problem"].Value.Properties["code"].Value.Enum {
		documented = append(documented, v.(string))
	}
	seen := map[string]bool{}
	for k := kindInvalidJSON; k <= kindInternal; k++ {
		pk := kinds[k]
		if pk.status < 400 || pk.code == "" || pk.title == "" {
			t.Errorf("kind %d has no status, code or title: %+v", k, pk)
		}
		if seen[pk.code] {
			t.Errorf("code %s is in the table twice", pk.code)
		}
		seen[pk.code] = true
		if !slices.Contains(documented, pk.code) {
			t.Errorf("code %s is not in openapi.yaml's Problem code enum", pk.code)
		}
	}
	if len(kinds) != int(kindInternal)+1 {
		t.Errorf("the table has %d entries for %d kinds", len(kinds)-1, kindInternal)
	}
}

// GET / lists every route, as the router has them, with its summary.
func TestIndex(t *testing.T) {
	e := newEnv(t)
	r := e.do("GET", "/", nil, nil, true)
	var idx index
	r.json(t, &idx)
	var routed []string
	_ = chi.Walk(e.srv.handler.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routed = append(routed, method+" "+route)
		return nil
	})
	var listed []string
	for _, rt := range idx.Routes {
		if rt.Summary == "" {
			t.Errorf("%s %s has no summary", rt.Method, rt.Path)
		}
		listed = append(listed, rt.Method+" "+rt.Path)
	}
	slices.Sort(routed)
	slices.Sort(listed)
	if r.status != 200 || idx.Contract != "/openapi.yaml" || !slices.Equal(routed, listed) {
		t.Errorf("GET / → %d %s\nroutes %v", r.status, r.body, routed)
	}
}

// Calls of a tool the service leaves off say which setting serves it;
// other unknown names point at the catalog.
func TestDisabledAndUnknownTools(t *testing.T) {
	e := newEnv(t, func(_ *Deps, o *registry.Options) {
		o.Disabled = map[string]string{"plan__execute": "TOOLSVC_PLAN_TOOL=true serves it"}
	})
	_, res := e.call("/calls", `{"toolName":"plan__execute","arguments":{}}`)
	if res.Code() != registry.CodeToolNotFound || !strings.Contains(res.Error.Message, "disabled") || !strings.Contains(res.Error.Message, "TOOLSVC_PLAN_TOOL") {
		t.Errorf("disabled tool: %+v", res.Error)
	}
	_, res = e.call("/calls", `{"toolName":"zzz__qqq","arguments":{}}`)
	if res.Code() != registry.CodeToolNotFound || !strings.Contains(res.Error.Suggestion, "GET /tools") {
		t.Errorf("unknown tool: %+v", res.Error)
	}
}

// A pending call says how to approve it and where its result will be,
// with its id escaped: "q?x" would name the call "q".
func TestPendingApprovalSaysHowToApprove(t *testing.T) {
	for id, path := range map[string]string{"c-7": "/calls/c-7", "q?x=1": "/calls/q%3Fx=1", "a/b#c": "/calls/a%2Fb%23c", "pct%2F": "/calls/pct%252F"} {
		res := &registry.Result{ToolCallID: id, ToolName: "shell__exec", Status: registry.StatusPendingApproval,
			Approval: &registry.ApprovalTicket{ID: "apr_1", ArgumentsDigest: "d"}}
		b, err := json.Marshal(nativeResult(res))
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Status   string
			Approval struct{ ID, Approve, Result string }
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if got.Status != "pending_approval" || got.Approval.ID != "apr_1" || !strings.Contains(got.Approval.Approve, "POST /approvals/apr_1") ||
			!strings.Contains(got.Approval.Approve, "approve scope") || got.Approval.Result != "GET "+path+"?wait=30s" {
			t.Errorf("pending result of %q: %s", id, b)
		}
	}
}

// A body whose declared length is over the limit is refused at once, not
// read until the client, which sends less, gives up.
func TestDeclaredLengthOverLimit(t *testing.T) {
	e := newEnv(t)
	conn, err := net.Dial("tcp", e.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /calls HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2000000\r\n\r\n{}"); err != nil {
		t.Fatal(err)
	}
	// A deadline on the wait only: without the check the answer never comes.
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer while the body is short of its declared length: %v", err)
	}
	defer resp.Body.Close()
	var p struct{ Code, Detail string }
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != 413 || p.Code != "payload_too_large" || !strings.Contains(p.Detail, "1048576") {
		t.Errorf("%d %+v %v", resp.StatusCode, p, err)
	}
}

// TestCallContextText: the members of a call's context are bounded and
// printable as its toolCallId is, and a bad one is named; the answer keeps
// the call's own id.
func TestCallContextText(t *testing.T) {
	e := newEnv(t)
	for member, value := range map[string]string{
		"instanceKey": `a\u0000b`,
		"agentName":   strings.Repeat("a", 257),
		"turnId":      `t\r\n`,
	} {
		body := `{"toolCallId":"ctx","toolName":"text__transform","arguments":{"operation":"upper","text":"a"},"context":{"` + member + `":"` + value + `"}}`
		r := e.do("POST", "/calls", []byte(body), map[string]string{"Content-Type": "application/json"}, false)
		if r.status != 400 || !strings.Contains(string(r.body), "context."+member+" ") {
			t.Errorf("context.%s %.40q: %d %s", member, value, r.status, r.body)
		}
	}
	body := `{"toolCallId":"ctx","toolName":"text__transform","arguments":{"operation":"upper","text":"a"},"context":{"agentName":"` + strings.Repeat("é", 256) + `","turnId":"t-1 ok"}}`
	if r := e.do("POST", "/calls", []byte(body), map[string]string{"Content-Type": "application/json"}, false); r.status != 200 {
		t.Errorf("256 characters of agentName: %d %s", r.status, r.body)
	}
}

// A toolCallId is at most 256 characters (not bytes), and must be valid
// UTF-8: the decoder would turn invalid bytes and unpaired surrogates into
// U+FFFD, so that different ids collided and the answer's id was not the
// one sent.
func TestToolCallIDText(t *testing.T) {
	e := newEnv(t)
	send := func(id string) (int, string) {
		body := append(append([]byte(`{"toolCallId":"`), id...), `","toolName":"text__transform","arguments":{"operation":"upper","text":"a"}}`...)
		r := e.do("POST", "/calls", body, map[string]string{"Content-Type": "application/json"}, false)
		return r.status, string(r.body)
	}
	if st, body := send(strings.Repeat("é", 256)); st != 200 || !strings.Contains(body, strings.Repeat("é", 256)) {
		t.Errorf("256 two-byte characters: %d %s", st, body)
	}
	if st, body := send(strings.Repeat("é", 257)); st != 400 || !strings.Contains(body, "longer than 256 characters") {
		t.Errorf("257 characters: %d %s", st, body)
	}
	for _, id := range []string{"u\xff", "u\xfe", `u\udfff`, `u\ud800x`, `u\ud800\ufffd`, "u\xff\xef\xbf\xbd"} {
		if st, body := send(id); st != 400 || !strings.Contains(body, "not valid UTF-8") {
			t.Errorf("id %q: %d %s", id, st, body)
		}
	}
	if st, body := send(`u\ud83d\ude00`); st != 200 || !strings.Contains(body, `"toolCallId":"u😀"`) {
		t.Errorf("a surrogate pair: %d %s", st, body)
	}
	// Control characters: PostgreSQL cannot store a NUL, and ids appear in
	// logs, URLs and headers.
	for _, id := range []string{`u\u0000`, `u\n`, `u\tv`, `u\u007f`, `u\u0085`} {
		if st, body := send(id); st != 400 || !strings.Contains(body, "toolCallId holds a control character") {
			t.Errorf("id %q: %d %s", id, st, body)
		}
	}
	// A U+FFFD of the id's own is a character like any other.
	for _, id := range []string{`a\ufffdb`, "a\xef\xbf\xbdb", `a\\ud800\ufffd`} {
		if st, body := send(id); st != 200 || !strings.Contains(body, "\ufffd") {
			t.Errorf("id %q: %d %s", id, st, body)
		}
	}
}

// TestProblemsEchoBounded: a problem's detail and instance carry what the
// client sent only up to a bound, however long it was.
func TestProblemsEchoBounded(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("é", 30<<10) // 60 KB
	for _, path := range []string{"/tools?format=" + long, "/tools?tier=" + long, "/tools?strict=" + long, "/tools/" + long} {
		r := e.do("GET", path, nil, nil, false)
		var p Problem
		r.json(t, &p)
		if r.status < 400 || len(r.body) > 8<<10 || len(p.Detail) > maxDetailBytes+len("…") || len(p.Instance) > maxEchoBytes || !utf8.ValidString(p.Detail) {
			t.Errorf("GET %.30s…: %d, %d bytes, detail %d bytes, instance %d bytes", path, r.status, len(r.body), len(p.Detail), len(p.Instance))
		}
	}
}

// A negative timeoutMs is refused, in a call and in a batch: it used to
// be taken as no timeoutMs at all. 0 keeps the tool's timeout.
func TestNegativeTimeoutRefused(t *testing.T) {
	e := newEnv(t)
	h := map[string]string{"Content-Type": "application/json"}
	r := e.do("POST", "/calls", []byte(`{"toolName":"text__transform","timeoutMs":-5,"arguments":{"operation":"upper","text":"a"}}`), h, false)
	if r.status != 400 || !strings.Contains(string(r.body), "timeoutMs is -5; it is a number of milliseconds, at least 1") {
		t.Errorf("timeoutMs -5: %d %s", r.status, r.body)
	}
	r = e.do("POST", "/calls/batch", []byte(`{"calls":[{"toolName":"text__transform","timeoutMs":-1,"arguments":{"operation":"upper","text":"a"}}]}`), h, false)
	if !strings.Contains(string(r.body), "timeoutMs is -1") {
		t.Errorf("timeoutMs -1 in a batch: %d %s", r.status, r.body)
	}
	r = e.do("POST", "/calls", []byte(`{"toolName":"text__transform","timeoutMs":0,"arguments":{"operation":"upper","text":"a"}}`), h, false)
	if r.status != 200 || !strings.Contains(string(r.body), `"status":"ok"`) {
		t.Errorf("timeoutMs 0: %d %s", r.status, r.body)
	}
}
