// Command gateway plays an LLM gateway in front of toolsvc, without any
// network model. It fetches the catalog in OpenAI shape and builds a real
// openai-go Chat Completions request with it (not sent), takes a recorded
// model response with tool calls, posts the calls to toolsvc as one batch,
// and prints the tool messages it would append to the conversation. No
// glue code sits between toolsvc and the model's types.
//
// Usage:
//
//	go run ./examples/gateway -toolsvc http://127.0.0.1:8080 -response examples/gateway/testdata/chat_completion.json
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

// run is the whole example; main only calls it.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	flags := flag.NewFlagSet("gateway", flag.ContinueOnError)
	base := flags.String("toolsvc", "http://127.0.0.1:8080", "base URL of toolsvc")
	token := flags.String("token", "", "bearer token for toolsvc, when it needs one")
	response := flags.String("response", "testdata/chat_completion.json", "a recorded Chat Completions response with tool calls")
	instance := flags.String("instance", "conv-42", "context.instanceKey of the conversation (its own workspace directory)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	c := &client{base: strings.TrimSuffix(*base, "/"), token: *token, http: &http.Client{Timeout: time.Minute}}

	// 1. The catalog in OpenAI shape goes into the request as it is.
	var catalog struct {
		Tools []openai.ChatCompletionToolUnionParam `json:"tools"`
	}
	if err := c.do(ctx, http.MethodGet, "/tools?format=openai", nil, &catalog); err != nil {
		return fmt.Errorf("catalog: %w", err)
	}
	messages := []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage("You are a helpful assistant. Use the tools when they help."),
		openai.UserMessage("Shout \"hello gateway\", give me its SHA-256, and read my notes.txt."),
	}
	req := openai.ChatCompletionNewParams{Model: openai.ChatModelGPT4o, Messages: messages, Tools: catalog.Tools}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("request: %w", err)
	}
	fmt.Fprintf(stdout, "request: model %s, %d tools, %d bytes (not sent)\n", req.Model, len(req.Tools), len(body))

	// 2. What the model answered, recorded.
	raw, err := os.ReadFile(*response)
	if err != nil {
		return err
	}
	var completion openai.ChatCompletion
	if err := json.Unmarshal(raw, &completion); err != nil {
		return fmt.Errorf("%s: %w", *response, err)
	}
	if len(completion.Choices) == 0 {
		return fmt.Errorf("%s: no choices", *response)
	}
	answer := completion.Choices[0].Message
	fmt.Fprintf(stdout, "model: finish_reason %s, %d tool calls\n", completion.Choices[0].FinishReason, len(answer.ToolCalls))

	// 3. The tool calls go to toolsvc as the model wrote them, in one batch.
	calls := make([]json.RawMessage, len(answer.ToolCalls))
	for i, tc := range answer.ToolCalls {
		calls[i] = json.RawMessage(tc.RawJSON())
	}
	batch := map[string]any{"calls": calls, "context": map[string]string{"instanceKey": *instance}}
	var results struct {
		Results []openai.ChatCompletionToolMessageParam `json:"results"`
	}
	if err := c.do(ctx, http.MethodPost, "/calls/batch?format=openai", batch, &results); err != nil {
		return fmt.Errorf("batch: %w", err)
	}

	// 4. The results go back into the conversation as they are.
	messages = append(messages, answer.ToParam())
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	for i := range results.Results {
		m := results.Results[i]
		messages = append(messages, openai.ChatCompletionMessageParamUnion{OfTool: &m})
		if err := enc.Encode(m); err != nil {
			return err
		}
	}
	req.Messages = messages
	body, err = json.Marshal(req)
	if err != nil {
		return fmt.Errorf("next request: %w", err)
	}
	fmt.Fprintf(stdout, "next request: %d messages, %d bytes (not sent)\n", len(req.Messages), len(body))
	return nil
}

// client talks JSON to toolsvc.
type client struct {
	base, token string
	http        *http.Client
}

func (c *client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	return json.Unmarshal(b, out)
}
