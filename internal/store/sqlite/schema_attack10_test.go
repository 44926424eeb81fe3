package sqlite

import (
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/storetest"
)

// TestSchemaTablesAreWhatTheMigrationsMake: the tables and columns that
// the start checks are every one the migrations make, so a migration
// that adds one cannot leave it unchecked.
func TestSchemaTablesAreWhatTheMigrationsMake(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolsvc.db")
	s, err := Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rows, err := s.r.QueryContext(t.Context(), `SELECT m.name, p.name FROM sqlite_schema AS m, pragma_table_info(m.name) AS p
		WHERE m.type = 'table' AND m.name NOT IN ('schema_migrations', 'sqlite_sequence')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	made := map[string][]string{}
	for rows.Next() {
		var table, column string
		if err := rows.Scan(&table, &column); err != nil {
			t.Fatal(err)
		}
		made[table] = append(made[table], column)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	storetest.CheckTables(t, made, schemaTables)
}

// TestStartRefusesAnIncompleteSchema: a database file missing a table or
// a column the store uses fails the start, naming it. Before, only the
// tables of the statements prepared at start (calls, audit) were checked:
// without its approvals table, say, the store opened, and every call
// that asks for approval failed.
func TestStartRefusesAnIncompleteSchema(t *testing.T) {
	tests := []struct {
		ddl, want string
	}{
		{`DROP TABLE approvals`, `table approvals is not as the migrations made it`},
		{`ALTER TABLE revoked_sessions RENAME TO revoked`, `table revoked_sessions is not as`},
		{`ALTER TABLE spills DROP COLUMN complete`, `table spills is not as`},
		{`DROP TABLE probe`, `table probe is not as`},
	}
	for _, tt := range tests {
		t.Run(tt.ddl, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "toolsvc.db")
			s, err := Open(t.Context(), path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(t.Context(), tt.ddl); err != nil {
				t.Fatal(err)
			}
			db.Close()
			again, err := Open(t.Context(), path, Options{})
			if err == nil {
				again.Close()
				t.Fatalf("the store opened after %s", tt.ddl)
			}
			if !strings.Contains(err.Error(), tt.want) || !errors.Is(err, registry.ErrStoreBroken) {
				t.Errorf("Open: %v; want %q and ErrStoreBroken", err, tt.want)
			}
		})
	}
}
