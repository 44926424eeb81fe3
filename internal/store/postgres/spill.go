package postgres

import (
	"context"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// The other methods of registry.SpillStore come with the embedded
// store.Spills.
var _ registry.SpillStore = (*Store)(nil)

// SpillBytes implements registry.SpillStore.
func (s *Store) SpillBytes(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(octet_length(data)), 0)::bigint FROM spill_chunks`).Scan(&n)
	return n, classify(err)
}
