package sandbox

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// maxInterpreterDepth is how many "#!" lines the kernel follows (Linux
// gives up after a few; four is plenty for real scripts).
const maxInterpreterDepth = 4

// ExecDeps returns what the kernel must be allowed to execute, besides
// the file itself, to run the program at path: for an ELF program, the
// dynamic loader named in its header; for a script, the interpreter named
// on its "#!" line and that interpreter's loader, and for
// "#!/usr/bin/env NAME" also NAME as found in DefaultPath (env executes
// it) and its loader. Under Landlock a program may execute only itself and
// its own loader, so pass ExecDeps of a script as Spec.AllowExec, and the
// program and ExecDeps of every further program it runs.
//
// It fails when the "#!" line names a relative or missing interpreter, or
// when env is asked for a program that is not in DefaultPath.
func ExecDeps(path string) ([]string, error) {
	var out []string
	add := func(p string) {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for _, p := range execSet(path, nil)[1:] {
		add(p) // its own dynamic loader
	}
	cur := path
	for depth := 0; ; depth++ {
		interp, args, ok, err := shebang(cur)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if depth == maxInterpreterDepth {
			return nil, fmt.Errorf("%s: more than %d nested interpreters", path, maxInterpreterDepth)
		}
		if !filepath.IsAbs(interp) {
			return nil, fmt.Errorf("%s: interpreter %q on the #! line must be an absolute path", cur, interp)
		}
		if !executable(interp) {
			return nil, fmt.Errorf("%s: interpreter %s is not an executable file", cur, interp)
		}
		add(interp)
		for _, p := range execSet(interp, nil)[1:] {
			add(p) // its dynamic loader
		}
		if filepath.Base(interp) == "env" {
			if name := envProgram(args); name != "" {
				found, err := LookPath(name)
				if err != nil {
					return nil, fmt.Errorf("%s: #!%s %s: %w", cur, interp, args, err)
				}
				add(found)
				for _, p := range execSet(found, nil)[1:] {
					add(p)
				}
				more, err := ExecDeps(found)
				if err != nil {
					return nil, err
				}
				for _, p := range more {
					add(p)
				}
			}
		}
		cur = interp
	}
	return out, nil
}

// shebang reads the "#!" line of the file at path, if it has one.
func shebang(path string) (interp, args string, ok bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", false, err
	}
	defer f.Close()
	line, err := bufio.NewReaderSize(f, 512).ReadSlice('\n')
	if !bytes.HasPrefix(line, []byte("#!")) {
		return "", "", false, nil
	}
	if err != nil && len(line) >= 512 {
		return "", "", false, fmt.Errorf("%s: the #! line is too long", path)
	}
	rest := strings.TrimSpace(string(line[2:]))
	interp, args, _ = strings.Cut(rest, " ")
	if interp == "" {
		return "", "", false, fmt.Errorf("%s: the #! line names no interpreter", path)
	}
	return interp, strings.TrimSpace(args), true, nil
}

// envProgram returns the program env would run for the arguments of a
// "#!/usr/bin/env ..." line (which the kernel passes as one argument, so
// "-S python3 -u" arrives whole): the first word that is neither an
// option nor a NAME=value assignment.
func envProgram(args string) string {
	for _, w := range strings.Fields(args) {
		if strings.HasPrefix(w, "-") || strings.Contains(w, "=") {
			continue
		}
		return w
	}
	return ""
}
