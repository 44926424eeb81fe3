package config

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Protected is a directory the configuration must stay out of, because
// others than the operator write files there: a configuration path inside
// it could be rewritten, and one that contains it would load whatever is
// written there as resources (a Caller with every scope, an MCPServer's
// command) at the next reload or start.
type Protected struct {
	// Setting names the setting that chose Dir ("TOOLSVC_WORKSPACE").
	Setting string
	Dir     string
	// Writers says who writes there, for the error ("callers write files
	// there").
	Writers string
}

// Options say how Load reads.
type Options struct {
	// Setting names the list of paths in errors ("TOOLSVC_CONFIG").
	Setting string
	// Protected are the directories no path may lie inside or contain,
	// symbolic links followed; neither may a file read from a directory.
	Protected []Protected
}

// Load reads every resource from paths (files, or directories whose *.yaml
// and *.yml files are read in name order), refusing an empty entry and
// the paths o protects against.
func (o Options) Load(paths ...string) ([]*Resource, error) {
	protected := make([]Protected, 0, len(o.Protected))
	for _, pr := range o.Protected {
		if pr.Dir != "" {
			pr.Dir = resolve(pr.Dir)
			protected = append(protected, pr)
		}
	}
	var out []*Resource
	for i, p := range paths {
		if strings.TrimSpace(p) == "" {
			return nil, fmt.Errorf("%s %q: entry %d of %d is empty; separate files and directories with single commas, and end the list with a path, not a comma",
				o.setting(), strings.Join(paths, ","), i+1, len(paths))
		}
		if err := o.check(protected, p, p); err != nil {
			return nil, err
		}
		files, err := expand(p)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if f != p {
				if err := o.check(protected, p, f); err != nil {
					return nil, err
				}
			}
			rs, err := LoadFile(f)
			if err != nil {
				return nil, err
			}
			out = append(out, rs...)
		}
	}
	return out, nil
}

// ReadFile reads a file the configuration names (a Caller's tokenFile, an
// Issuer's jwksFile) as the package's ReadFile does, refusing one that
// lies inside a protected directory: whoever writes there could replace
// it, and a token file replaced is a token the writer knows.
func (o Options) ReadFile(path string) ([]byte, error) {
	real := resolve(path)
	for _, pr := range o.Protected {
		if pr.Dir != "" && within(resolve(pr.Dir), real) {
			return nil, fmt.Errorf("%s (%s) lies inside %s %s, and %s, so it could be replaced: keep the files the configuration names outside %s",
				path, real, pr.Setting, resolve(pr.Dir), pr.Writers, pr.Setting)
		}
	}
	return ReadFile(path)
}

func (o Options) setting() string {
	if o.Setting == "" {
		return "configuration path"
	}
	return o.Setting
}

// check refuses path (entry, or a file read from the directory entry)
// when it lies inside a protected directory (resolved), or contains one.
func (o Options) check(protected []Protected, entry, path string) error {
	real := resolve(path)
	where := fmt.Sprintf("%s entry %q (%s)", o.setting(), entry, real)
	if path != entry {
		where = fmt.Sprintf("%s entry %q has %s, which", o.setting(), entry, path)
		if real != path {
			where += " resolves to " + real + " and"
		}
	}
	for _, pr := range protected {
		switch {
		case within(pr.Dir, real):
			return fmt.Errorf("%s lies inside %s %s, and %s, so the configuration could be rewritten. Move the configuration out of %s, or set %s to a directory that does not hold it",
				where, pr.Setting, pr.Dir, pr.Writers, pr.Dir, pr.Setting)
		case within(real, pr.Dir):
			return fmt.Errorf("%s contains %s %s, and %s: a YAML file written there would be loaded as configuration (a Caller with every scope, an MCPServer's command) at the next reload or start. Set %s to a directory outside %s, or name the configuration's files in %s rather than the directory that holds them",
				where, pr.Setting, pr.Dir, pr.Writers, pr.Setting, real, o.setting())
		}
	}
	return nil
}

// resolve returns p absolute, clean and with its symbolic links followed,
// as far as it exists (a workspace may be made only after the
// configuration is read).
func resolve(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real
	}
	parent := filepath.Dir(abs)
	if parent == abs {
		return abs
	}
	return filepath.Join(resolve(parent), filepath.Base(abs))
}

// within reports whether p is dir or lies below it; both are resolved.
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && (rel == "." || filepath.IsLocal(rel))
}
