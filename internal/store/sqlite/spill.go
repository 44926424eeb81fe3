package sqlite

import (
	"context"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

var _ registry.SpillStore = (*Store)(nil)

// CreateSpill implements registry.SpillStore.
func (s *Store) CreateSpill(ctx context.Context, info *registry.SpillInfo) (registry.SpillWriter, error) {
	return s.sql.CreateSpill(ctx, info)
}

// ReadSpill implements registry.SpillStore.
func (s *Store) ReadSpill(ctx context.Context, callerID, toolCallID, stream string, offset int64, limit int) (*registry.SpillInfo, []byte, error) {
	return s.sql.ReadSpill(ctx, callerID, toolCallID, stream, offset, limit)
}

// ListSpills implements registry.SpillStore.
func (s *Store) ListSpills(ctx context.Context, callerID, toolCallID string) ([]*registry.SpillInfo, error) {
	return s.sql.ListSpills(ctx, callerID, toolCallID)
}

// DeleteExpiredSpills implements registry.SpillStore.
func (s *Store) DeleteExpiredSpills(ctx context.Context, now time.Time) (int64, error) {
	return s.sql.DeleteExpiredSpills(ctx, now)
}

// SpillBytes implements registry.SpillStore.
func (s *Store) SpillBytes(ctx context.Context) (int64, error) {
	var n int64
	err := s.r.QueryRowContext(ctx, `SELECT coalesce(sum(length(data)), 0) FROM spill_chunks`).Scan(&n)
	return n, err
}
