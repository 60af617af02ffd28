package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"
)

// Stamped at build time by the Makefile:
//
//	go build -ldflags "-X main.version=v0.3.0 -X main.commit=<sha> -X main.date=<RFC 3339>"
//
// They are the only package-level variables of the CLI: -X can set nothing
// else. Unset, buildInfo falls back to what the Go toolchain recorded.
var (
	version = ""
	commit  = ""
	date    = ""
)

// versionInfo is what "hamaster version" prints (and history records).
type versionInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit"`
	Date     string `json:"date,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
	Module   string `json:"module,omitempty"`
}

// buildInfo combines the -ldflags stamp with runtime/debug.ReadBuildInfo:
// the main module's version (set by "go install module@version"), the VCS
// revision and time (set by "go build" in a git checkout), the Go version.
func buildInfo() versionInfo {
	v := versionInfo{Version: version, Commit: commit, Date: date, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.Go = bi.GoVersion
		v.Module = bi.Main.Path
		if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if v.Commit == "" {
					v.Commit = s.Value
				}
			case "vcs.time":
				if v.Date == "" {
					v.Date = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && commit == "" && v.Commit != "" {
			v.Commit += "-dirty"
		}
	}
	if v.Version == "" {
		v.Version = "dev"
	}
	if v.Commit == "" {
		v.Commit = "unknown"
	}
	return v
}

// String is the one-line text form.
func (v versionInfo) String() string {
	s := fmt.Sprintf("hamaster %s (commit %s", v.Version, v.Commit)
	if v.Date != "" {
		s += ", built " + v.Date
	}
	return s + ", " + v.Go + " " + v.Platform + ")"
}

func printVersion(e *env, g *globals) error {
	v := buildInfo()
	if g.json() {
		return writeJSON(e.stdout, v)
	}
	_, err := fmt.Fprintln(e.stdout, v.String())
	return err
}

func versionCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print hamaster's version, commit and Go version",
		Description: `The version and commit are stamped at build time (make build, make dist);
a binary built otherwise reports what the Go toolchain recorded.

Example:
  hamaster version --output json`,
		Action: func(c *cli.Context) error { return printVersion(e, g) },
	}
}
