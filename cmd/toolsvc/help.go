package main

import (
	"fmt"
	"io"
	"reflect"
	"runtime/debug"
	"strings"
	"text/tabwriter"
)

// usage is the command line; settings follow it in toolsvc help.
const usage = `usage: toolsvc [command]

commands:
  serve     serve the HTTP API (the default)
  validate  check the configuration and exit
  health    GET /healthz of the instance at TOOLSVC_ADDR (for container health checks; HTTPS with TOOLSVC_TLS_CERT_FILE)
  version   print the version, the commit and the Go version
  help      print this help and every setting

toolsvc takes no flags: settings come from the environment (toolsvc help lists them),
resources (tools, policies, callers, MCP servers) from the YAML files TOOLSVC_CONFIG names.`

// setting is one environment variable of Config.
type setting struct {
	Name, Default, Description string
}

// settings lists every setting of Config in declaration order, from its
// struct tags: env (the variable), envDefault and desc. A new setting
// needs all three (a test checks that desc is there).
func settings() []setting {
	var out []setting
	t := reflect.TypeFor[Config]()
	for f := range t.Fields() {
		name, ok := f.Tag.Lookup("env")
		if !ok {
			continue
		}
		out = append(out, setting{Name: name, Default: f.Tag.Get("envDefault"), Description: f.Tag.Get("desc")})
	}
	return out
}

// printHelp writes the usage and every setting with its default.
func printHelp(w io.Writer) {
	fmt.Fprintln(w, usage)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "settings (environment variables):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, s := range settings() {
		def := s.Default
		if def == "" {
			def = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", s.Name, def, s.Description)
	}
	tw.Flush()
}

// buildInfo says which toolsvc this is: the version set at build time
// (or the module version), the VCS commit and the Go version.
func buildInfo() string {
	v, commit, goVersion := version, "unknown", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && commit != "unknown" {
			commit += " (modified)"
		}
	}
	return fmt.Sprintf("toolsvc %s\ncommit %s\n%s", v, commit, strings.TrimSpace(goVersion))
}

// usageError is a command line toolsvc does not take.
func usageError(format string, args ...any) error {
	return fmt.Errorf("%s\n\n%s", fmt.Sprintf(format, args...), usage)
}
