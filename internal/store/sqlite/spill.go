package sqlite

import (
	"context"
	"fmt"
	"os"

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

// walGrowth is the most the WAL file grows to: journal_size_limit (1 MiB,
// where SQLite also checkpoints by itself), and a chunk of kept output
// with its frame headers written on top before the checkpoint that
// follows its commit.
const walGrowth = 1<<20 + 2*registry.SpillChunkBytes

// spillRoom says why n more bytes of kept output would not leave the
// reserve free for call records (nil when they would, or when the volume
// cannot be asked). The room is the volume's free space and the pages
// that deleted spills and records left free in the database file (new
// rows take them first), less what the WAL takes: what it may still grow
// to, and what it holds that a checkpoint will add to the database file,
// together at most the larger of its size and walGrowth. Counting the
// volume's free space alone, kept outputs filled a 6 MiB volume: the
// chunks waiting in the WAL grew the file after the check, and the WAL
// took the reserve.
func (s *Store) spillRoom(ctx context.Context, n int64) error {
	free, size, ok := VolumeSpace(s.dir)
	if !ok {
		return nil
	}
	var wal int64
	if fi, err := os.Stat(s.lock[1].Name() + "-wal"); err == nil {
		wal = fi.Size()
	}
	var pages, pageSize int64
	if err := s.r.QueryRowContext(ctx, `SELECT * FROM pragma_freelist_count(), pragma_page_size()`).Scan(&pages, &pageSize); err != nil {
		pages = 0
	}
	room := free + pages*pageSize - max(wal, walGrowth)
	if reserve := spillReserve(size); room-n < reserve {
		return fmt.Errorf("%w: it has %d bytes free (%d counting the database's free pages, less what its WAL may take), and kept outputs leave %d of it to call records",
			registry.ErrSpillNoRoom, free, room, reserve)
	}
	return nil
}

// CreateSpill implements registry.SpillStore: store.Spills', with each
// chunk refused when it would not leave the reserve free (spillRoom).
func (s *Store) CreateSpill(ctx context.Context, info *registry.SpillInfo) (registry.SpillWriter, error) {
	if err := s.spillRoom(ctx, 0); err != nil {
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
	if err := w.s.spillRoom(ctx, int64(len(p))); err != nil {
		return err
	}
	return w.SpillWriter.WriteChunk(ctx, seq, p)
}
