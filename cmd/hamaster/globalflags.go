package main

import (
	"slices"

	"github.com/urfave/cli/v2"
)

// Global flags are accepted before the command name and after it, at any
// level ("hamaster status --output json", "hamaster local --cluster x up"),
// as kubectl and etcdctl take them. urfave/cli v2 only parses a flag at the
// level that defines it, so every command gets a hidden copy of each global
// flag it does not define itself; the copies carry no default and no
// environment variable (those stay on the application's flags, so the
// precedence flag > HAMASTER_<NAME> > --config > default is unchanged).
// A copy given on the command line overrides the value resolved before it
// (the one nearest the end of the command line wins, as with a repeated
// flag); see globals.overlay.

// globalFlagNames are the names of the flags every command accepts.
func globalFlagNames(e *env) []string {
	var names []string
	for _, f := range globalFlags(e) {
		if f.Names()[0] == "version" {
			continue // the application's --version; commands have their own
		}
		names = append(names, f.Names()[0])
	}
	return names
}

// commandCopy returns a copy of the global flag f for a command: same
// names and usage, hidden from the command's help, no default and no
// environment variable.
func commandCopy(f cli.Flag) cli.Flag {
	switch x := f.(type) {
	case *cli.StringFlag:
		return &cli.StringFlag{Name: x.Name, Aliases: x.Aliases, Usage: x.Usage, Hidden: true}
	case *cli.BoolFlag:
		return &cli.BoolFlag{Name: x.Name, Aliases: x.Aliases, Usage: x.Usage, Hidden: true}
	}
	return nil
}

// acceptGlobals adds the global flags to cmd and its subcommands and makes
// each command's Before apply the ones given after the command name.
func acceptGlobals(cmd *cli.Command, e *env, g *globals) {
	defined := map[string]bool{}
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			defined[n] = true
		}
	}
	for _, f := range globalFlags(e) {
		if f.Names()[0] == "version" || slices.ContainsFunc(f.Names(), func(n string) bool { return defined[n] }) {
			continue
		}
		if cp := commandCopy(f); cp != nil {
			cmd.Flags = append(cmd.Flags, cp)
		}
	}
	prev := cmd.Before
	cmd.Before = func(c *cli.Context) error {
		if err := g.overlay(c, e); err != nil {
			return err
		}
		if prev != nil {
			return prev(c)
		}
		return nil
	}
	for _, sub := range cmd.Subcommands {
		acceptGlobals(sub, e, g)
	}
}

// setAbove reports whether the flag name was set (on the command line, by
// the environment or the config file) at a level above c.
func setAbove(c *cli.Context, name string) bool {
	for _, a := range c.Lineage()[1:] {
		if a.App == nil {
			continue // the root context urfave/cli wraps ctx in
		}
		if slices.Contains(a.LocalFlagNames(), name) {
			return true
		}
	}
	return false
}

// configPath is the --config in effect for c: the one given nearest the
// end of the command line, else the application's (flag, environment).
func configPath(c *cli.Context) string {
	for _, a := range c.Lineage() {
		if a.App == nil {
			continue
		}
		if slices.Contains(a.LocalFlagNames(), "config") {
			return a.String("config")
		}
	}
	return ""
}

// before is the application's Before: the globals resolved, and
// "hamaster --version [command]" answered.
func (g *globals) before(c *cli.Context, e *env) error {
	if err := g.load(c, e); err != nil {
		return err
	}
	if c.Bool("version") {
		if err := printVersion(e, g); err != nil {
			return err
		}
		return cli.Exit("", 0)
	}
	return nil
}

// overlay applies the global flags given after a command name: their
// values replace the resolved ones, a --config given there fills what no
// flag or environment variable set, and everything is validated again.
func (g *globals) overlay(c *cli.Context, e *env) error {
	names := globalFlagNames(e)
	local := c.LocalFlagNames()
	if slices.Contains(local, "config") {
		path := c.String("config")
		raw, err := readConfig(path)
		if err != nil {
			return err
		}
		if err := checkConfigKeys(c, path, raw); err != nil {
			return err
		}
		for _, n := range names {
			v, ok := raw[n]
			if !ok || n == "config" || slices.Contains(local, n) || setAbove(c, n) || envSet(c, e, n) {
				continue
			}
			if err := c.Set(n, scalar(v)); err != nil {
				return usageErr("--config %s: key %s: %v", path, n, err)
			}
		}
		local = c.LocalFlagNames()
	}
	changed := false
	for _, n := range names {
		if !slices.Contains(local, n) {
			continue
		}
		changed = true
		g.assign(c, n)
	}
	if !changed {
		return nil
	}
	return g.validate(e)
}

// envSet reports whether the application flag name has its HAMASTER_*
// variable set in the env given to run.
func envSet(c *cli.Context, e *env, name string) bool {
	for _, f := range c.App.Flags {
		if f.Names()[0] != name {
			continue
		}
		if ev, ok := f.(interface{ GetEnvVars() []string }); ok {
			for _, k := range ev.GetEnvVars() {
				if e.vars[k] != "" {
					return true
				}
			}
		}
	}
	return false
}

// assign copies the value of the global flag name, as c resolves it, into g.
func (g *globals) assign(c *cli.Context, name string) {
	strs := map[string]*string{
		"cluster": &g.cluster, "provider": &g.provider, "flavor": &g.flavor,
		"state-dir": &g.stateDir, "output": &g.output,
		"log-level": &g.logLevel, "log-format": &g.logFmt,
	}
	if p, ok := strs[name]; ok {
		*p = c.String(name)
		return
	}
	bools := map[string]*bool{"dry-run": &g.dryRun, "yes": &g.yes}
	if p, ok := bools[name]; ok {
		*p = c.Bool(name)
	}
}
