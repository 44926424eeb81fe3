package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolsvc/toolsvc/internal/store"
)

// PostgresSchema returns a fresh schema name in the test database at url,
// for one test's stores (postgres.Options.Schema, TOOLSVC_STORE_SCHEMA).
// The schema is dropped when t ends, after the stores the test opened
// later have closed (cleanups run last first).
func PostgresSchema(t testing.TB, url string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "toolsvc_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	return schema
}

// CheckTables fails t unless tables (what a store checks at start) name
// every table and column in made (what its migrations make, table to
// columns) and nothing else, so a migration that adds one cannot leave
// it unchecked.
func CheckTables(t testing.TB, made map[string][]string, tables []store.Table) {
	t.Helper()
	checked := map[string][]string{}
	for _, tb := range tables {
		for c := range strings.SplitSeq(tb.Columns, ",") {
			checked[tb.Name] = append(checked[tb.Name], strings.TrimSpace(c))
		}
	}
	for _, m := range []map[string][]string{made, checked} {
		for _, cs := range m {
			slices.Sort(cs)
		}
	}
	for table, cs := range made {
		if !slices.Equal(cs, checked[table]) {
			t.Errorf("table %s: the migrations make columns %v, the store checks %v", table, cs, checked[table])
		}
	}
	for table := range checked {
		if _, ok := made[table]; !ok {
			t.Errorf("the store checks table %s, which the migrations do not make", table)
		}
	}
}
