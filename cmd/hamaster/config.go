package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"
)

// applyConfig fills every flag of flags that the command line did not set:
// first from its HAMASTER_* environment variable (taken from the env given
// to run, so tests need not touch the process environment), then from the
// --config YAML file. Unknown keys in the file are an error naming the key,
// so a typo never passes silently.
func applyConfig(c *cli.Context, e *env, flags []cli.Flag, checkKeys bool) error {
	for _, f := range flags {
		name := f.Names()[0]
		if c.IsSet(name) {
			continue
		}
		ev, ok := f.(interface{ GetEnvVars() []string })
		if !ok {
			continue
		}
		for _, k := range ev.GetEnvVars() {
			if v, ok := e.vars[k]; ok && v != "" {
				if err := c.Set(name, v); err != nil {
					return usageErr("$%s: %v", k, err)
				}
				break
			}
		}
	}
	path := configPath(c)
	if path == "" {
		return nil
	}
	raw, err := readConfig(path)
	if err != nil {
		return err
	}
	if checkKeys {
		if err := checkConfigKeys(c, path, raw); err != nil {
			return err
		}
	}
	for _, f := range flags {
		name := f.Names()[0]
		v, ok := raw[name]
		if !ok || c.IsSet(name) {
			continue
		}
		values := []any{v}
		if list, isList := v.([]any); isList {
			values = list
		}
		for _, item := range values {
			if err := c.Set(name, scalar(item)); err != nil {
				return usageErr("--config %s: key %s: %v", path, name, err)
			}
		}
	}
	return nil
}

// readConfig reads the --config YAML file: a mapping of flag names to values.
func readConfig(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageErr("--config: %v", err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return nil, usageErr("--config %s: not a YAML mapping of flag names to values: %v", path, err)
	}
	return raw, nil
}

// checkConfigKeys refuses keys that are no flag of any command.
func checkConfigKeys(c *cli.Context, path string, raw map[string]any) error {
	known := map[string]bool{}
	add := func(flags []cli.Flag) {
		for _, f := range flags {
			for _, n := range f.Names() {
				known[n] = true
			}
		}
	}
	add(c.App.Flags)
	var visit func(cmds []*cli.Command)
	visit = func(cmds []*cli.Command) {
		for _, cmd := range cmds {
			add(cmd.Flags)
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
		hint := "keys are flag names without dashes, e.g. cluster, provider, state-dir"
		for _, k := range unknown {
			if r := removedKey(k); r != "" {
				hint += "; " + k + " was removed: " + r
			}
		}
		return usageErr("--config %s: unknown key(s) %s (%s)", path, strings.Join(unknown, ", "), hint)
	}
	return nil
}

// removedKey says what replaced k, a flag of an earlier release that a
// config file may still name; "" for any other key.
func removedKey(k string) string {
	switch k {
	case "gce-master-format":
		return "set flavor (kubeup or kubeadm)"
	case "aws-master-format":
		return "set flavor (kubeup for kube-up, or hamaster)"
	}
	return ""
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
