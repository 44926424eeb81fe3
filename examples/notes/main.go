// Command notes is the backend of the example http tool in
// examples/tools/notes.yaml: it keeps short notes per conversation
// (context.instanceKey) in memory.
//
//	go run ./examples/notes -addr 127.0.0.1:8181
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"sync"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8181", "listen address")
	token := flag.String("token", "example-token", "bearer token callers must send")
	flag.Parse()
	srv := &http.Server{Addr: *addr, Handler: newHandler(*token), ReadHeaderTimeout: 5 * time.Second}
	log.Printf("notes backend listening on %s", *addr)
	log.Fatal(srv.ListenAndServe())
}

// envelope is what toolsvc POSTs for every call.
type envelope struct {
	ToolName   string          `json:"toolName"`
	Export     string          `json:"export"`
	Arguments  json.RawMessage `json:"arguments"`
	ToolCallID string          `json:"toolCallId"`
	Context    struct {
		InstanceKey string `json:"instanceKey"`
	} `json:"context"`
}

type note struct {
	ID   int    `json:"id"`
	Text string `json:"text"`
}

func newHandler(token string) http.Handler {
	var mu sync.Mutex
	notes := map[string][]note{} // by instance key
	mux := http.NewServeMux()
	mux.HandleFunc("POST /invoke", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		var env envelope
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&env); err != nil {
			http.Error(w, "the body is not a call envelope: "+err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		key := env.Context.InstanceKey
		switch env.Export {
		case "add":
			var args struct {
				Text string `json:"text"`
			}
			if err := json.Unmarshal(env.Arguments, &args); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			n := note{ID: len(notes[key]) + 1, Text: args.Text}
			notes[key] = append(notes[key], n)
			reply(w, map[string]any{"id": n.ID, "saved": true})
		case "list":
			reply(w, map[string]any{"notes": append([]note{}, notes[key]...)})
		default:
			http.Error(w, fmt.Sprintf("unknown export %q", env.Export), http.StatusNotFound)
		}
	})
	return mux
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
