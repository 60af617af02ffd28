package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"
)

// applyConfigFile reads --config (if any) and sets each flag of the
// current command chain that neither the command line nor the environment
// set. Unknown keys are an error naming the key, so a typo never passes
// silently.
func applyConfigFile(c *cli.Context) error {
	path := c.String("config")
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return usageErr("--config: %v", err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return usageErr("--config %s: not a YAML mapping of flag names to values: %v", path, err)
	}
	known := map[string]bool{}
	for _, f := range c.App.Flags {
		for _, n := range f.Names() {
			known[n] = true
		}
	}
	var visit func(cmds []*cli.Command)
	visit = func(cmds []*cli.Command) {
		for _, cmd := range cmds {
			for _, f := range cmd.Flags {
				for _, n := range f.Names() {
					known[n] = true
				}
			}
			visit(cmd.Subcommands)
		}
	}
	visit(c.App.Commands)
	var unknown []string
	for k := range raw {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return usageErr("--config %s: unknown key(s) %s (keys are flag names without dashes, e.g. cluster, provider, state-dir)", path, strings.Join(unknown, ", "))
	}
	for _, f := range c.App.Flags {
		name := f.Names()[0]
		v, ok := raw[name]
		if !ok || c.IsSet(name) {
			continue
		}
		if err := c.Set(name, scalar(v)); err != nil {
			return usageErr("--config %s: key %s: %v", path, name, err)
		}
	}
	return nil
}

// applyCommandConfig does the same for a subcommand's own flags.
func applyCommandConfig(c *cli.Context) error {
	path := c.String("config")
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return usageErr("--config: %v", err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return usageErr("--config %s: %v", path, err)
	}
	for _, f := range c.Command.Flags {
		name := f.Names()[0]
		v, ok := raw[name]
		if !ok || c.IsSet(name) {
			continue
		}
		if list, isList := v.([]any); isList {
			for _, item := range list {
				if err := c.Set(name, scalar(item)); err != nil {
					return usageErr("--config %s: key %s: %v", path, name, err)
				}
			}
			continue
		}
		if err := c.Set(name, scalar(v)); err != nil {
			return usageErr("--config %s: key %s: %v", path, name, err)
		}
	}
	return nil
}

func scalar(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	default:
		return fmt.Sprint(x)
	}
}
