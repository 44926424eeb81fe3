package main

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/store"
)

// TestNewerSchemaIsNotRetried: a database migrated by a newer toolsvc
// cannot be opened by any retry of this one, so start-up says so at once
// rather than retrying for TOOLSVC_STORE_START_TIMEOUT (16 tries in 60 s).
func TestNewerSchemaIsNotRetried(t *testing.T) {
	dir := t.TempDir()
	cfg, err := loadConfig([]string{"TOOLSVC_DATA_DIR=" + dir, "TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_STORE_START_TIMEOUT=60s"})
	if err != nil {
		t.Fatal(err)
	}
	log := newLogger(cfg, io.Discard)
	st, err := openStoreRetrying(t.Context(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	db, err := sql.Open("sqlite", filepath.Join(dir, "toolsvc.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, 'from the future', 0)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := openStoreRetrying(ctx, cfg, log); !errors.Is(err, store.ErrNewerSchema) {
		t.Fatalf("opening a newer schema: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("gave up after %s, retrying what no retry can open", took)
	}
}
