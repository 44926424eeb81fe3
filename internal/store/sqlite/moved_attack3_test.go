package sqlite_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

// TestWritesToADeletedDatabaseAreRefused: SQLite keeps writing to the
// files it opened when they are deleted or replaced under it, and what it
// writes then is lost at the next start. The store refuses the writes
// (a call answers 503 and does not run, instead of 200 with a record that
// a restart loses) and fails its readiness probe, naming the file.
func TestWritesToADeletedDatabaseAreRefused(t *testing.T) {
	for _, c := range []struct {
		name  string
		fault func(t *testing.T, db string)
	}{
		{"deleted", func(t *testing.T, db string) {
			for _, f := range []string{db, db + "-wal", db + "-shm"} {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"replaced", func(t *testing.T, db string) {
			if err := os.Rename(db, db+".old"); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(db, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"wal deleted", func(t *testing.T, db string) {
			if err := os.Remove(db + "-wal"); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "toolsvc.db")
			s := open(t, db, sqlite.Options{})
			ctx := t.Context()
			begin := func(id string) error {
				_, _, err := s.BeginCall(ctx, &registry.CallRecord{CallerID: "c", ToolCallID: id, ToolName: "fs__write",
					ArgumentsDigest: "d", State: registry.CallRunning})
				return err
			}
			if err := begin("before"); err != nil {
				t.Fatal(err)
			}
			if err := s.Ping(ctx); err != nil {
				t.Fatal(err)
			}
			c.fault(t, db)
			if err := begin("after"); err == nil || !strings.Contains(err.Error(), "deleted or replaced") {
				t.Errorf("BeginCall after the file was %s: %v, want it refused", c.name, err)
			}
			if err := s.Ping(ctx); err == nil || !strings.Contains(err.Error(), db) {
				t.Errorf("Ping after the file was %s: %v, want an error naming %s", c.name, err, db)
			}
			if rec, err := s.GetCall(ctx, "c", "before"); err != nil || rec.State != registry.CallRunning {
				t.Errorf("GetCall of the record written before: %v %+v", err, rec)
			}
		})
	}
}
