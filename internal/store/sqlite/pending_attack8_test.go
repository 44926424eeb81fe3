package sqlite_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/store"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
	"github.com/toolsvc/toolsvc/internal/store/storetest"
)

// TestPendingLimitHoldsUnderConcurrency: callers filing approval requests
// at the same moment cannot pass their bound on waiting requests, with
// the store as it is and as the service wraps it (store.WithDeadline).
func TestPendingLimitHoldsUnderConcurrency(t *testing.T) {
	t.Run("store", func(t *testing.T) {
		storetest.RunPendingLimit(t, open(t, filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{}))
	})
	t.Run("with deadline", func(t *testing.T) {
		storetest.RunPendingLimit(t, store.WithDeadline(open(t, filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{}), 5*time.Second))
	})
}
