// Package kubeenv reads and writes kube-env the way kube-up.sh does, for
// every provider and fake in hamaster.
//
// kube-env is a YAML mapping of environment variable names to strings.
// kube-up writes it in cluster/gce/util.sh (build-linux-kube-env, and
// write-master-env → build-kube-env for masters) as one `KEY: 'value'` line
// per variable, each value passed through `yaml-quote` (single quotes,
// a quote inside doubled); a master reads it back in
// cluster/gce/gci/configure-helper.sh (download-kube-env) with a YAML parser
// and exports every key. The "kube-master-certs" metadata item has the same
// form, its values the base64 of PEM files (download-kube-master-certs).
//
// Parse accepts any YAML a real master would accept (plain, single- or
// double-quoted scalars, comments); Render writes kube-up's form.
package kubeenv

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Metadata keys of a kube-up GCE master.
const (
	// KeyEnv is the instance metadata item holding the environment.
	KeyEnv = "kube-env"
	// KeyCerts is the instance metadata item holding certificates and keys
	// (cluster/gce/util.sh write-master-env / build-kube-master-certs).
	KeyCerts = "kube-master-certs"
)

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Parse reads a kube-env document: a YAML mapping of variable names to
// scalars. Non-scalar values, duplicate keys and names that are not
// environment variable names are errors naming the key.
func Parse(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(s), &doc); err != nil {
		return nil, fmt.Errorf("kube-env is not YAML: %w", err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return out, nil
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("kube-env: want a mapping of KEY: 'value' lines, got YAML %s at line %d", kindName(m.Kind), m.Line)
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode || !nameRE.MatchString(k.Value) {
			return nil, fmt.Errorf("kube-env line %d: key %q is not an environment variable name", k.Line, k.Value)
		}
		if _, dup := out[k.Value]; dup {
			return nil, fmt.Errorf("kube-env line %d: key %s repeated", k.Line, k.Value)
		}
		if v.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("kube-env line %d: %s is a YAML %s, want a string", v.Line, k.Value, kindName(v.Kind))
		}
		if v.Tag == "!!null" {
			out[k.Value] = ""
			continue
		}
		out[k.Value] = v.Value
	}
	return out, nil
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "sequence"
	case yaml.AliasNode:
		return "alias"
	case yaml.DocumentNode:
		return "document"
	}
	return "scalar"
}

// Render writes env as kube-up does: sorted `KEY: 'value'` lines, a quote
// inside a value doubled (yaml-quote in cluster/gce/util.sh). A value that
// single quotes cannot carry exactly (a line break, which YAML folds into
// a space, or a control character) is written double-quoted with escapes.
func Render(env map[string]string) string {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteString(": ")
		b.WriteString(quote(env[k]))
		b.WriteByte('\n')
	}
	return b.String()
}

func quote(v string) string {
	plain := true
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			plain = false
			break
		}
	}
	if plain {
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	}
	n := yaml.Node{Kind: yaml.ScalarNode, Style: yaml.DoubleQuotedStyle, Value: v}
	out, err := yaml.Marshal(&n)
	if err != nil { // cannot happen for a string scalar
		panic(err)
	}
	return string(bytes.TrimRight(out, "\n"))
}

// ParseCerts reads kube-master-certs: variable name → decoded file.
func ParseCerts(s string) (map[string][]byte, error) {
	m, err := Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyCerts, err)
	}
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("%s: %s is not base64: %w", KeyCerts, k, err)
		}
		out[k] = b
	}
	return out, nil
}

// RenderCerts writes kube-master-certs: each file base64-encoded.
func RenderCerts(files map[string][]byte) string {
	m := make(map[string]string, len(files))
	for k, v := range files {
		m[k] = base64.StdEncoding.EncodeToString(v)
	}
	return Render(m)
}

// hamasterFilePrefix marks kube-master-certs keys that carry hamaster's own
// per-replica files (the local data plane's certificate layout) rather
// than kube-up's variables; the key stays a valid shell variable name, so
// a real master's download-kube-master-certs still exports it.
const hamasterFilePrefix = "HAMASTER_FILE_"

// FileKey is the kube-master-certs key of a hamaster file such as
// "etcd-peer.crt" (HAMASTER_FILE_ETCD_PEER__CRT). Names must be lower
// case letters, digits, '-' and '.'.
func FileKey(name string) string {
	return hamasterFilePrefix + strings.ToUpper(strings.NewReplacer(".", "__", "-", "_").Replace(name))
}

// FileName reverses FileKey; ok is false for kube-up's own keys.
func FileName(key string) (string, bool) {
	s, ok := strings.CutPrefix(key, hamasterFilePrefix)
	if !ok {
		return "", false
	}
	return strings.NewReplacer("__", ".", "_", "-").Replace(strings.ToLower(s)), true
}

// RenderFiles writes hamaster files as kube-master-certs (FileKey keys).
func RenderFiles(files map[string][]byte) string {
	m := make(map[string][]byte, len(files))
	for k, v := range files {
		m[FileKey(k)] = v
	}
	return RenderCerts(m)
}

// ParseFiles reads the hamaster files of a kube-master-certs item, by file
// name; kube-up's own keys are left out.
func ParseFiles(s string) (map[string][]byte, error) {
	all, err := ParseCerts(s)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for k, v := range all {
		if n, ok := FileName(k); ok {
			out[n] = v
		}
	}
	return out, nil
}
