package storetest

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// FinishFails is a real store whose FinishCall fails while Down is set,
// as when the database goes away (or its disk fills) after a tool ran:
// the executor then holds the result in memory and retries.
type FinishFails struct {
	registry.Store
	Down atomic.Bool
}

// ErrStoreDown is FinishFails' error.
var ErrStoreDown = errors.New("store down")

// FinishCall implements registry.Store.
func (f *FinishFails) FinishCall(ctx context.Context, c, id string, r *registry.Result, a *registry.AuditEntry) (*registry.CallRecord, bool, error) {
	if f.Down.Load() {
		return nil, false, ErrStoreDown
	}
	return f.Store.FinishCall(ctx, c, id, r, a)
}
