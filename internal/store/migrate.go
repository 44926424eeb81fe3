package store

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Migration is one versioned schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// ReadMigrations reads the migrations in dir of fsys: files named
// NNNN_name.sql with distinct positive numbers. Numbers may leave gaps
// (branches of the code reserve numbers ahead), so a store applies, in
// order, every migration whose number it has not recorded (Pending), each
// in its own transaction.
func ReadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_description.sql", name)
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(b)})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migration %s: version %d is also %s", out[i].Name, out[i].Version, out[i-1].Name)
		}
	}
	return out, nil
}

// ErrNewerSchema means the database was migrated by a newer program: no
// retry of this one can open it.
var ErrNewerSchema = errors.New("store: the schema is newer than this program")

// Pending returns the migrations of ms whose versions are not in applied,
// in order. A version in applied that ms does not have means the database
// was migrated by a newer program.
func Pending(ms []Migration, applied []int) ([]Migration, error) {
	known := make(map[int]bool, len(ms))
	for _, m := range ms {
		known[m.Version] = true
	}
	done := make(map[int]bool, len(applied))
	for _, v := range applied {
		if !known[v] {
			return nil, fmt.Errorf("%w: database schema has migration %d, which this program does not know; run a newer toolsvc", ErrNewerSchema, v)
		}
		done[v] = true
	}
	var out []Migration
	for _, m := range ms {
		if !done[m.Version] {
			out = append(out, m)
		}
	}
	return out, nil
}
