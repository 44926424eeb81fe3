package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// SpillRead assembles the bytes [offset, offset+limit) of a kept output
// from its chunks (registry.SpillChunkBytes each, numbered from 0), for
// ReadSpill in both stores: the store reads the chunks First to Last in
// order and hands each to Add.
type SpillRead struct {
	// First and Last are the chunks to read; Empty says there are none
	// (the range is past the stored bytes).
	First, Last int64
	Empty       bool

	offset, end int64
	out         []byte
}

// NewSpillRead checks offset and limit and plans the read of a spill that
// stores stored bytes.
func NewSpillRead(offset int64, limit int, stored int64) (*SpillRead, error) {
	if offset < 0 || limit < 0 {
		return nil, fmt.Errorf("offset and limit must not be negative")
	}
	end := min(offset+int64(limit), stored)
	if offset >= end {
		return &SpillRead{Empty: true}, nil
	}
	return &SpillRead{
		First: offset / registry.SpillChunkBytes, Last: (end - 1) / registry.SpillChunkBytes,
		offset: offset, end: end, out: make([]byte, 0, end-offset),
	}, nil
}

// Add takes chunk seq's data.
func (r *SpillRead) Add(seq int64, data []byte) {
	base := seq * registry.SpillChunkBytes
	lo, hi := max(r.offset-base, 0), min(r.end-base, int64(len(data)))
	if lo < hi {
		r.out = append(r.out, data[lo:hi]...)
	}
}

// Bytes returns what was read, or an error naming the spill when chunks
// were missing.
func (r *SpillRead) Bytes(toolCallID, stream string) ([]byte, error) {
	if r.Empty {
		return []byte{}, nil
	}
	if int64(len(r.out)) != r.end-r.offset {
		return nil, fmt.Errorf("spill %s/%s is missing chunks", toolCallID, stream)
	}
	return r.out, nil
}

// Spills are the methods of registry.SpillStore that both stores share;
// a store embeds them (SpillBytes, a dialect's own, it writes itself).
type Spills struct{ sql *SQL }

// Spills returns s's kept-output methods, for a store to embed.
func (s *SQL) Spills() Spills { return Spills{s} }

// CreateSpill implements registry.SpillStore: a new spill replaces one
// of the same call and stream, unless it is of an unrecorded call and a
// call with its id is recorded.
func (p Spills) CreateSpill(ctx context.Context, info *registry.SpillInfo) (registry.SpillWriter, error) {
	s := p.sql
	var id int64
	err := s.InTx(ctx, func(tx Tx) error {
		if info.Unrecorded {
			var recorded int
			if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM calls WHERE caller_id = $1 AND tool_call_id = $2`,
				info.CallerID, info.ToolCallID).Scan(&recorded); err != nil {
				return err
			}
			if recorded > 0 {
				return registry.ErrSpillOfRecordedCall
			}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM spills WHERE caller_id = $1 AND tool_call_id = $2 AND stream = $3`,
			info.CallerID, info.ToolCallID, info.Stream); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO spills (caller_id, tool_call_id, stream, tool_name, created_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
			info.CallerID, info.ToolCallID, info.Stream, info.ToolName, s.Time(info.CreatedAt), s.Time(info.ExpiresAt)).Scan(&id)
	})
	if err != nil {
		return nil, err
	}
	return &spillWriter{s: s, id: id}, nil
}

type spillWriter struct {
	s  *SQL
	id int64
}

func (w *spillWriter) WriteChunk(ctx context.Context, seq int, p []byte) error {
	_, err := w.s.Write.Exec(ctx, `INSERT INTO spill_chunks (spill_id, seq, data) VALUES ($1, $2, $3)`, w.id, seq, p)
	return err
}

func (w *spillWriter) Commit(ctx context.Context, total, stored int64) error {
	n, err := w.s.Write.Exec(ctx, `UPDATE spills SET total_bytes = $1, stored_bytes = $2, complete = TRUE WHERE id = $3`, total, stored, w.id)
	if err != nil {
		return err
	}
	if n != 1 {
		return errors.New("the spill was replaced or deleted while it was written")
	}
	return nil
}

func (w *spillWriter) Abort(ctx context.Context) {
	_, _ = w.s.Write.Exec(ctx, `DELETE FROM spills WHERE id = $1`, w.id)
}

const spillColumns = `stream, tool_name, total_bytes, stored_bytes, created_at, expires_at`

// scanSpill reads a row of spillColumns into in.
func scanSpill(row Row, in *registry.SpillInfo, lead ...any) error {
	return row.Scan(append(lead, &in.Stream, &in.ToolName, &in.TotalBytes, &in.StoredBytes,
		ScanTime(&in.CreatedAt), ScanTime(&in.ExpiresAt))...)
}

// ReadSpill implements registry.SpillStore.
func (p Spills) ReadSpill(ctx context.Context, callerID, toolCallID, stream string, offset int64, limit int) (*registry.SpillInfo, []byte, error) {
	s := p.sql
	if offset < 0 || limit < 0 {
		return nil, nil, fmt.Errorf("offset and limit must not be negative")
	}
	if !storable(callerID, toolCallID, stream) {
		return nil, nil, registry.ErrNotFound
	}
	var id int64
	info := &registry.SpillInfo{CallerID: callerID, ToolCallID: toolCallID}
	err := scanSpill(s.Read.QueryRow(ctx, `SELECT id, `+spillColumns+` FROM spills
		WHERE caller_id = $1 AND tool_call_id = $2 AND stream = $3 AND complete AND expires_at > $4`,
		callerID, toolCallID, stream, s.Time(s.Clock())), info, &id)
	if err != nil {
		return nil, nil, found(err)
	}
	read, err := NewSpillRead(offset, limit, info.StoredBytes)
	if err != nil || read.Empty {
		return info, []byte{}, err
	}
	rows, err := s.Read.Query(ctx, `SELECT seq, data FROM spill_chunks WHERE spill_id = $1 AND seq BETWEEN $2 AND $3 ORDER BY seq`,
		id, read.First, read.Last)
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
func (p Spills) ListSpills(ctx context.Context, callerID, toolCallID string) ([]*registry.SpillInfo, error) {
	s := p.sql
	if !storable(callerID, toolCallID) {
		return nil, nil
	}
	rows, err := s.Read.Query(ctx, `SELECT `+spillColumns+` FROM spills
		WHERE caller_id = $1 AND tool_call_id = $2 AND complete AND expires_at > $3 ORDER BY stream`,
		callerID, toolCallID, s.Time(s.Clock()))
	return collect(rows, err, func(row Row) (*registry.SpillInfo, error) {
		in := &registry.SpillInfo{CallerID: callerID, ToolCallID: toolCallID}
		return in, scanSpill(row, in)
	})
}

// DeleteExpiredSpills implements registry.SpillStore.
func (p Spills) DeleteExpiredSpills(ctx context.Context, now time.Time) (int64, error) {
	s := p.sql
	return s.Write.Exec(ctx, `DELETE FROM spills WHERE expires_at <= $1`, s.Time(now))
}
