package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store"
)

var _ registry.SpillStore = (*Store)(nil)

// CreateSpill implements registry.SpillStore.
func (s *Store) CreateSpill(ctx context.Context, info *registry.SpillInfo) (registry.SpillWriter, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM spills WHERE caller_id = ? AND tool_call_id = ? AND stream = ?`,
		info.CallerID, info.ToolCallID, info.Stream); err != nil {
		return nil, err
	}
	var id int64
	if err := tx.QueryRowContext(ctx, `INSERT INTO spills (caller_id, tool_call_id, stream, tool_name, created_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?) RETURNING id`,
		info.CallerID, info.ToolCallID, info.Stream, info.ToolName, micro(info.CreatedAt), micro(info.ExpiresAt)).Scan(&id); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return &spillWriter{s: s, id: id}, nil
}

type spillWriter struct {
	s  *Store
	id int64
}

func (w *spillWriter) WriteChunk(ctx context.Context, seq int, p []byte) error {
	_, err := w.s.w.ExecContext(ctx, `INSERT INTO spill_chunks (spill_id, seq, data) VALUES (?, ?, ?)`, w.id, seq, p)
	return err
}

func (w *spillWriter) Commit(ctx context.Context, total, stored int64) error {
	r, err := w.s.w.ExecContext(ctx, `UPDATE spills SET total_bytes = ?, stored_bytes = ?, complete = 1 WHERE id = ?`, total, stored, w.id)
	if err != nil {
		return err
	}
	if n, _ := r.RowsAffected(); n != 1 {
		return errors.New("the spill was replaced or deleted while it was written")
	}
	return nil
}

func (w *spillWriter) Abort(ctx context.Context) {
	_, _ = w.s.w.ExecContext(ctx, `DELETE FROM spills WHERE id = ?`, w.id)
}

// ReadSpill implements registry.SpillStore.
func (s *Store) ReadSpill(ctx context.Context, callerID, toolCallID, stream string, offset int64, limit int) (*registry.SpillInfo, []byte, error) {
	if offset < 0 || limit < 0 {
		return nil, nil, fmt.Errorf("offset and limit must not be negative")
	}
	var id int64
	info := &registry.SpillInfo{CallerID: callerID, ToolCallID: toolCallID, Stream: stream}
	var created, expires int64
	err := s.r.QueryRowContext(ctx, `SELECT id, tool_name, total_bytes, stored_bytes, created_at, expires_at FROM spills
		WHERE caller_id = ? AND tool_call_id = ? AND stream = ? AND complete = 1 AND expires_at > ?`,
		callerID, toolCallID, stream, micro(s.clock())).Scan(&id, &info.ToolName, &info.TotalBytes, &info.StoredBytes, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, registry.ErrNotFound
	}
	if err != nil {
		return nil, nil, err
	}
	info.CreatedAt, info.ExpiresAt = fromMicro(created), fromMicro(expires)
	read, err := store.NewSpillRead(offset, limit, info.StoredBytes)
	if err != nil || read.Empty {
		return info, []byte{}, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT seq, data FROM spill_chunks WHERE spill_id = ? AND seq BETWEEN ? AND ? ORDER BY seq`, id, read.First, read.Last)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var data []byte
		if err := rows.Scan(&seq, &data); err != nil {
			return nil, nil, err
		}
		read.Add(seq, data)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	out, err := read.Bytes(toolCallID, stream)
	if err != nil {
		return nil, nil, err
	}
	return info, out, nil
}

// ListSpills implements registry.SpillStore.
func (s *Store) ListSpills(ctx context.Context, callerID, toolCallID string) ([]*registry.SpillInfo, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT stream, tool_name, total_bytes, stored_bytes, created_at, expires_at FROM spills
		WHERE caller_id = ? AND tool_call_id = ? AND complete = 1 AND expires_at > ? ORDER BY stream`, callerID, toolCallID, micro(s.clock()))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*registry.SpillInfo
	for rows.Next() {
		in := &registry.SpillInfo{CallerID: callerID, ToolCallID: toolCallID}
		var created, expires int64
		if err := rows.Scan(&in.Stream, &in.ToolName, &in.TotalBytes, &in.StoredBytes, &created, &expires); err != nil {
			return nil, err
		}
		in.CreatedAt, in.ExpiresAt = fromMicro(created), fromMicro(expires)
		out = append(out, in)
	}
	return out, rows.Err()
}

// DeleteExpiredSpills implements registry.SpillStore.
func (s *Store) DeleteExpiredSpills(ctx context.Context, now time.Time) (int64, error) {
	r, err := s.w.ExecContext(ctx, `DELETE FROM spills WHERE expires_at <= ?`, micro(now))
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// SpillBytes implements registry.SpillStore.
func (s *Store) SpillBytes(ctx context.Context) (int64, error) {
	var n int64
	err := s.r.QueryRowContext(ctx, `SELECT coalesce(sum(length(data)), 0) FROM spill_chunks`).Scan(&n)
	return n, err
}
