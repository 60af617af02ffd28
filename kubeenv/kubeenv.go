// Package kubeenv encodes the two metadata items a kube-up GCE master boots
// from: "kube-env" (the environment) and "kube-master-certs" (certificate
// files). Both use kube-up's YAML subset, one `KEY: 'value'` line per
// entry, sorted, single quotes doubled inside values. kube-master-certs
// values are the base64 of each file, keyed by the file's base name.
//
// The provider writes these items; the GCE fake reads them like a master's
// boot script would.
package kubeenv

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Metadata keys.
const (
	// KeyEnv is the instance metadata item holding the environment.
	KeyEnv = "kube-env"
	// KeyCerts is the instance metadata item holding certificate files.
	KeyCerts = "kube-master-certs"
)

var keyRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// Encode renders m as sorted `KEY: 'value'` lines.
func Encode(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: '%s'\n", k, strings.ReplaceAll(m[k], "'", "''"))
	}
	return b.String()
}

// Decode parses what Encode writes (blank lines and # comments ignored).
func Decode(s string) (map[string]string, error) {
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		k = strings.TrimSpace(k)
		v = strings.TrimSpace(v)
		if !ok || !keyRE.MatchString(k) {
			return nil, fmt.Errorf("line %d: want KEY: 'value', got %q", n, line)
		}
		if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
			v = strings.ReplaceAll(v[1:len(v)-1], "''", "'")
		}
		m[k] = v
	}
	return m, sc.Err()
}

// EncodeFiles renders files as kube-master-certs.
func EncodeFiles(files map[string][]byte) string {
	m := make(map[string]string, len(files))
	for k, v := range files {
		m[k] = base64.StdEncoding.EncodeToString(v)
	}
	return Encode(m)
}

// DecodeFiles parses kube-master-certs.
func DecodeFiles(s string) (map[string][]byte, error) {
	m, err := Decode(s)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = b
	}
	return out, nil
}
