package data

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

func BenchmarkParse(b *testing.B) {
	var csvText, jsonlText, yamlText strings.Builder
	csvText.WriteString("id,name,score\n")
	for i := range 1000 {
		fmt.Fprintf(&csvText, "%d,name %d,%d.5\n", i, i, i)
		fmt.Fprintf(&jsonlText, "{\"id\":%d,\"name\":\"name %d\",\"score\":%d.5}\n", i, i, i)
		fmt.Fprintf(&yamlText, "---\nid: %d\nname: name %d\nscore: %d.5\n", i, i, i)
	}
	p := &parser{o: Options{}.withDefaults()}
	for format, text := range map[string]string{"csv": csvText.String(), "jsonl": jsonlText.String(), "yaml": yamlText.String()} {
		args, _ := json.Marshal(map[string]any{"format": format, "text": text})
		req := &registry.Request{Arguments: args}
		b.Run(format, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				out, err := p.parse(context.Background(), req)
				if err != nil || out.(*Result).RowCount != 1000 {
					b.Fatal(err)
				}
			}
		})
	}
}
