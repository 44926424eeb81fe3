// Command probe runs inside the container under test (container_test.go):
// it reports what the container's user may write, and it leaves orphans
// for PID 1 to reap.
//
//	probe write PATH...  tries to create each file and prints, as JSON, its uid and gid and each error
//	probe orphan         starts a copy of itself in a session of its own that exits shortly after, and returns at once
//	probe linger         sleeps 200 ms (the orphan)
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// writeResult is one attempt of "probe write".
type writeResult struct {
	Path  string `json:"path"`
	Error string `json:"error,omitempty"`
	// ReadOnly is true when the error is EROFS: the file system, not the
	// file's permissions, refused.
	ReadOnly bool `json:"readOnly"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe write PATH... | orphan | linger")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "write":
		report := struct {
			UID    int           `json:"uid"`
			GID    int           `json:"gid"`
			Writes []writeResult `json:"writes"`
		}{UID: os.Getuid(), GID: os.Getgid()}
		for _, p := range os.Args[2:] {
			r := writeResult{Path: p}
			if err := os.WriteFile(p, []byte("probe\n"), 0o644); err != nil {
				r.Error, r.ReadOnly = err.Error(), errors.Is(err, syscall.EROFS)
			} else {
				os.Remove(p)
			}
			report.Writes = append(report.Writes, r)
		}
		json.NewEncoder(os.Stdout).Encode(report)
	case "orphan":
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		c := exec.Command(self, "linger")
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(c.Process.Pid)
	case "linger":
		time.Sleep(200 * time.Millisecond)
	default:
		fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
		os.Exit(2)
	}
}
