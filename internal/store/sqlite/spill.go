package sqlite

import (
	"context"
	"fmt"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// The other methods of registry.SpillStore come with the embedded
// store.Spills.
var _ registry.SpillStore = (*Store)(nil)

// SpillBytes implements registry.SpillStore.
func (s *Store) SpillBytes(ctx context.Context) (int64, error) {
	var n int64
	err := s.r.QueryRowContext(ctx, `SELECT coalesce(sum(length(data)), 0) FROM spill_chunks`).Scan(&n)
	return n, err
}

// spillReserve is what kept outputs leave free of a volume of size bytes:
// a tenth of it, at most 64 MiB and at least twice what the readiness
// probe writes. Call records need the room, and so do the deletions that
// reclaim expired outputs (in WAL mode a DELETE writes first): spills that
// filled the volume would leave the store unable to record a call or to
// free the space, however long it waited.
func spillReserve(size int64) int64 {
	return max(min(size/10, 64<<20), 2*probeHeadroom)
}

// spillRoom says why n more bytes of kept output would not leave the
// reserve free on the store's volume (nil when they would, or when the
// volume cannot be asked).
func (s *Store) spillRoom(n int64) error {
	free, size, ok := volumeSpace(s.dir)
	if !ok {
		return nil
	}
	if reserve := spillReserve(size); free-n < reserve {
		return fmt.Errorf("the store's volume has %d bytes free, and kept outputs leave %d of it to call records", free, reserve)
	}
	return nil
}

// CreateSpill implements registry.SpillStore: store.Spills', with each
// chunk refused when it would not leave the reserve free (spillRoom).
func (s *Store) CreateSpill(ctx context.Context, info *registry.SpillInfo) (registry.SpillWriter, error) {
	if err := s.spillRoom(0); err != nil {
		return nil, err
	}
	w, err := s.Spills.CreateSpill(ctx, info)
	if err != nil {
		return nil, err
	}
	return &roomWriter{SpillWriter: w, s: s}, nil
}

// roomWriter is a spill writer that checks the volume before each chunk.
type roomWriter struct {
	registry.SpillWriter
	s *Store
}

func (w *roomWriter) WriteChunk(ctx context.Context, seq int, p []byte) error {
	if err := w.s.spillRoom(int64(len(p))); err != nil {
		return err
	}
	return w.SpillWriter.WriteChunk(ctx, seq, p)
}
