package postgres

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// PostgreSQL's disk_full is the registry's ErrStoreFull; other errors of
// the database are not.
func TestDiskFullIsStoreFull(t *testing.T) {
	if err := full(&pgconn.PgError{Code: "53100", Message: "could not extend file"}); !errors.Is(err, registry.ErrStoreFull) {
		t.Errorf("disk_full: %v, want ErrStoreFull", err)
	}
	if err := full(&pgconn.PgError{Code: "23505"}); errors.Is(err, registry.ErrStoreFull) {
		t.Errorf("a unique violation taken for a full disk: %v", err)
	}
	if full(nil) != nil {
		t.Error("no error became one")
	}
}
