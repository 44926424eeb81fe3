package http

import (
	"bytes"
	"io"
	"net/http"
	"testing"
)

// BenchmarkPostCalls is POST /calls end to end through a real HTTP server
// on loopback: client, chi, decoding, executor, text__transform, encoding.
func BenchmarkPostCalls(b *testing.B) {
	e := newEnv(b)
	body := []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"hello"}}`)
	client := e.ts.Client()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Post(e.ts.URL+"/calls", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatal(resp.Status)
		}
	}
}
