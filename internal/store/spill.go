package store

import (
	"fmt"

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
