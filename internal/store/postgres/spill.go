package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store"
)

var _ registry.SpillStore = (*Store)(nil)

// CreateSpill implements registry.SpillStore.
func (s *Store) CreateSpill(ctx context.Context, info *registry.SpillInfo) (registry.SpillWriter, error) {
	var id int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM spills WHERE caller_id = $1 AND tool_call_id = $2 AND stream = $3`,
			info.CallerID, info.ToolCallID, info.Stream); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO spills (caller_id, tool_call_id, stream, tool_name, created_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
			info.CallerID, info.ToolCallID, info.Stream, info.ToolName, info.CreatedAt.UTC(), info.ExpiresAt.UTC()).Scan(&id)
	})
	if err != nil {
		return nil, err
	}
	return &spillWriter{s: s, id: id}, nil
}

type spillWriter struct {
	s  *Store
	id int64
}

func (w *spillWriter) WriteChunk(ctx context.Context, seq int, p []byte) error {
	_, err := w.s.pool.Exec(ctx, `INSERT INTO spill_chunks (spill_id, seq, data) VALUES ($1, $2, $3)`, w.id, seq, p)
	return err
}

func (w *spillWriter) Commit(ctx context.Context, total, stored int64) error {
	tag, err := w.s.pool.Exec(ctx, `UPDATE spills SET total_bytes = $1, stored_bytes = $2, complete = true WHERE id = $3`, total, stored, w.id)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return errors.New("the spill was replaced or deleted while it was written")
	}
	return nil
}

func (w *spillWriter) Abort(ctx context.Context) {
	_, _ = w.s.pool.Exec(ctx, `DELETE FROM spills WHERE id = $1`, w.id)
}

// ReadSpill implements registry.SpillStore.
func (s *Store) ReadSpill(ctx context.Context, callerID, toolCallID, stream string, offset int64, limit int) (*registry.SpillInfo, []byte, error) {
	if offset < 0 || limit < 0 {
		return nil, nil, fmt.Errorf("offset and limit must not be negative")
	}
	var id int64
	info := &registry.SpillInfo{CallerID: callerID, ToolCallID: toolCallID, Stream: stream}
	err := s.pool.QueryRow(ctx, `SELECT id, tool_name, total_bytes, stored_bytes, created_at, expires_at FROM spills
		WHERE caller_id = $1 AND tool_call_id = $2 AND stream = $3 AND complete AND expires_at > $4`,
		callerID, toolCallID, stream, s.clock()).Scan(&id, &info.ToolName, &info.TotalBytes, &info.StoredBytes, &info.CreatedAt, &info.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, registry.ErrNotFound
	}
	if err != nil {
		return nil, nil, err
	}
	info.CreatedAt, info.ExpiresAt = info.CreatedAt.UTC(), info.ExpiresAt.UTC()
	read, err := store.NewSpillRead(offset, limit, info.StoredBytes)
	if err != nil || read.Empty {
		return info, []byte{}, err
	}
	rows, err := s.pool.Query(ctx, `SELECT seq, data FROM spill_chunks WHERE spill_id = $1 AND seq BETWEEN $2 AND $3 ORDER BY seq`, id, read.First, read.Last)
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
	rows, err := s.pool.Query(ctx, `SELECT stream, tool_name, total_bytes, stored_bytes, created_at, expires_at FROM spills
		WHERE caller_id = $1 AND tool_call_id = $2 AND complete AND expires_at > $3 ORDER BY stream`, callerID, toolCallID, s.clock())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*registry.SpillInfo
	for rows.Next() {
		in := &registry.SpillInfo{CallerID: callerID, ToolCallID: toolCallID}
		if err := rows.Scan(&in.Stream, &in.ToolName, &in.TotalBytes, &in.StoredBytes, &in.CreatedAt, &in.ExpiresAt); err != nil {
			return nil, err
		}
		in.CreatedAt, in.ExpiresAt = in.CreatedAt.UTC(), in.ExpiresAt.UTC()
		out = append(out, in)
	}
	return out, rows.Err()
}

// DeleteExpiredSpills implements registry.SpillStore.
func (s *Store) DeleteExpiredSpills(ctx context.Context, now time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM spills WHERE expires_at <= $1`, now.UTC())
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// SpillBytes implements registry.SpillStore.
func (s *Store) SpillBytes(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(octet_length(data)), 0)::bigint FROM spill_chunks`).Scan(&n)
	return n, err
}
