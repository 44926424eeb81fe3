package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
	"github.com/toolsvc/toolsvc/internal/store/storetest"
)

func TestSpillConformance(t *testing.T) {
	storetest.RunSpill(t, func(t *testing.T) registry.SpillStore {
		return open(t, filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{})
	})
}
