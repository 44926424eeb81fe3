package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadRefusesProtected: no configuration path may lie inside the
// workspace or contain it, however the paths are spelled or linked: a
// caller who writes files there (fs__write) would otherwise write the
// configuration, a Caller with every scope or an MCPServer's command.
func TestLoadRefusesProtected(t *testing.T) {
	const doc = "apiVersion: toolsvc/v1\nkind: Caller\nmetadata: {name: c}\nspec: {}\n"
	// root/
	//   conf/c.yaml             a configuration directory
	//   conf/ws/                a workspace inside it
	//   conf/link.yaml ->       ../ws2/evil.yaml
	//   ws2/evil.yaml           a workspace with a file in it
	//   conf-link ->            conf
	//   ws-link ->              conf/ws
	//   conf2/c.yaml, ws3/      apart (ws3 shares conf2's name prefix: ws3 is not below conf)
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"conf/ws", "ws2", "conf2", "conf2-ws"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"conf/c.yaml", "ws2/evil.yaml", "conf2/c.yaml"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"conf-link": "conf", "ws-link": "conf/ws", "conf2/link.yaml": "../ws2/evil.yaml"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	p := func(rel string) string { return filepath.Join(root, rel) }
	t.Chdir(root)

	for _, c := range []struct {
		name    string
		entry   string
		ws      string
		want    []string // in the error; none: loads
		resolve bool
	}{
		{name: "directory holds the workspace", entry: "conf", ws: "conf/ws",
			want: []string{`TOOLSVC_CONFIG entry "conf" (` + p("conf") + ")", "contains TOOLSVC_WORKSPACE " + p("conf/ws"), "callers write files there", "Set TOOLSVC_WORKSPACE to a directory outside " + p("conf"), "name the configuration's files in TOOLSVC_CONFIG"}},
		{name: "the current directory, workspace not made yet", entry: ".", ws: "./workspace",
			want: []string{`TOOLSVC_CONFIG entry "." (` + root + ")", "contains TOOLSVC_WORKSPACE " + p("workspace")}},
		{name: "through a link to the directory", entry: "conf-link", ws: p("conf/ws"),
			want: []string{`entry "conf-link" (` + p("conf") + ")", "contains TOOLSVC_WORKSPACE"}},
		{name: "workspace through a link", entry: p("conf"), ws: "ws-link",
			want: []string{"contains TOOLSVC_WORKSPACE " + p("conf/ws")}},
		{name: "directory is the workspace", entry: "conf/ws", ws: "conf/ws",
			want: []string{"lies inside TOOLSVC_WORKSPACE " + p("conf/ws"), "Move the configuration out of " + p("conf/ws")}},
		{name: "file inside the workspace", entry: "ws2/evil.yaml", ws: "ws2",
			want: []string{`entry "ws2/evil.yaml" (` + p("ws2/evil.yaml") + ") lies inside TOOLSVC_WORKSPACE " + p("ws2")}},
		{name: "a directory's file links into the workspace", entry: "conf2", ws: "ws2",
			want: []string{`entry "conf2" has ` + filepath.Join("conf2", "link.yaml") + ", which resolves to " + p("ws2/evil.yaml") + " and lies inside TOOLSVC_WORKSPACE"}},
		{name: "a file beside the workspace", entry: "conf/c.yaml", ws: "conf/ws"},
		{name: "a workspace beside the directory, sharing its prefix", entry: "conf2/c.yaml", ws: "conf2-ws"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := Options{Setting: "TOOLSVC_CONFIG", Protected: []Protected{{Setting: "TOOLSVC_WORKSPACE", Dir: c.ws, Writers: "callers write files there"}}}
			rs, err := o.Load(c.entry)
			if len(c.want) == 0 {
				if err != nil || len(rs) != 1 {
					t.Fatalf("Load(%s) = %d resources, %v; want 1", c.entry, len(rs), err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Load(%s) with the workspace %s: no error", c.entry, c.ws)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}

// TestLoadEmptyEntry: a stray comma in TOOLSVC_CONFIG is named as such,
// not as "stat : no such file or directory".
func TestLoadEmptyEntry(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(f, []byte("apiVersion: toolsvc/v1\nkind: Caller\nmetadata: {name: c}\nspec: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := Options{Setting: "TOOLSVC_CONFIG"}
	for _, c := range []struct {
		paths []string
		want  string
	}{
		{[]string{f, ""}, `TOOLSVC_CONFIG "` + f + `,": entry 2 of 2 is empty`},
		{[]string{f, "", f}, "entry 2 of 3 is empty; separate files and directories with single commas"},
		{[]string{" "}, "entry 1 of 1 is empty"},
	} {
		_, err := o.Load(c.paths...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Load(%q) = %v, want an error containing %q", c.paths, err, c.want)
		}
	}
}
