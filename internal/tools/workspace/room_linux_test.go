package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRoom: with a reserve larger than what the file system has free, a
// new instance directory is not made (an existing one still opens); with
// none, everything goes.
func TestRoom(t *testing.T) {
	base := t.TempDir()
	var st syscall.Statfs_t
	if err := syscall.Statfs(base, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	open, err := New(base, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if err := open.Room(1<<40, 0); err != nil {
		t.Errorf("no reserve: %v", err)
	}
	d, err := open.Open(Owner{CallerID: "a"}, "old")
	if err != nil {
		t.Fatal(err)
	}
	d.Close()

	full, err := New(base, Options{Reserve: free + 1<<30})
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	var nr *NoRoomError
	if err := full.Room(0, 0); err != nil {
		t.Errorf("Room for nothing: %v", err)
	}
	if err := full.Room(1, 0); !errors.As(err, &nr) || nr.Reserve != free+1<<30 || !strings.Contains(err.Error(), "TOOLSVC_WORKSPACE_RESERVE") {
		t.Errorf("Room with too little free: %v", err)
	}
	if _, err := full.Open(Owner{CallerID: "a"}, "new"); !errors.As(err, &nr) {
		t.Errorf("a new instance without room: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(base, "callers", "a", "instances", "new")); !os.IsNotExist(err) {
		t.Errorf("the refused instance directory exists: %v", err)
	}
	d, err = full.Open(Owner{CallerID: "a"}, "old")
	if err != nil {
		t.Errorf("an existing instance without room: %v", err)
	} else {
		d.Close()
	}
}
