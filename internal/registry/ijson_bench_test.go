package registry

import (
	"testing"
)

// BenchmarkInteroperable is the I-JSON check of a call's arguments, with
// decoders kept and without.
func BenchmarkInteroperable(b *testing.B) {
	small := []byte(`{"path":"notes/today.txt","limit":100}`)
	b.Run("kept", func(b *testing.B) {
		var c jsonChecker
		b.ReportAllocs()
		for b.Loop() {
			if err := c.interoperable(small); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("new", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := (*jsonChecker)(nil).interoperable(small); err != nil {
				b.Fatal(err)
			}
		}
	})
}
