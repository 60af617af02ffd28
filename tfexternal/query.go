// Package tfexternal is hamaster's side of the protocol of Terraform's
// `external` data source (registry.terraform.io/providers/hashicorp/external,
// data source "external"):
//
//   - Terraform writes the data source's `query` map to the program's stdin
//     as ONE JSON object whose values are all strings (an absent `query` is
//     sent as `{}`; since hashicorp/external v2.3.2 map elements whose value
//     is null are left out, v2.3.1 sent them as "").
//   - The program prints ONE JSON object whose values are all strings to
//     stdout and exits 0; Terraform exposes it as the data source's `result`.
//   - On failure the program prints a human-readable message (ideally one
//     line) to stderr and exits non-zero; Terraform then ignores stdout and
//     shows the message.
//   - Terraform expects no observable side effects and re-runs the program
//     on every refresh.
//
// ParseQuery reads the query strictly; Result turns a workflows.Report into
// the flat result. Both are pure: the CLI (cmd/hamaster, `hamaster
// terraform`) does the I/O.
package tfexternal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Query keys hamaster itself understands. Every other key is kept verbatim
// in Query.Options for the provider (project, region, zone, aws_region...).
const (
	KeyCluster            = "cluster"
	KeyProvider           = "provider"
	KeyStateDir           = "state_dir"
	KeyNextReplicaName    = "next_replica_name"
	KeyNextReplicaAddress = "next_replica_address"
)

// MaxQuerySize bounds what ParseQuery reads from stdin. A Terraform query is
// a handful of short strings; anything near this size is a mistake.
const MaxQuerySize = 1 << 20

// Query is the data source's `query` block. A known key whose value is ""
// counts as absent (Terraform users pass "" for "not set", and
// hashicorp/external v2.3.1 turned null into ""), so its default applies:
// the CLI fills Cluster, Provider and StateDir from --cluster, --provider
// (default "local") and --state-dir (flag > HAMASTER_* environment > --config
// file > default), exactly as for every other command.
type Query struct {
	Cluster  string
	Provider string
	StateDir string
	// NextReplicaName pins the name of the next replica (default: a
	// deterministic name, see NextReplicaName).
	NextReplicaName string
	// NextReplicaAddress is the internal IP reserved for the next replica,
	// when the operator's configuration already knows it; only then can
	// etcd_initial_cluster include the new replica's own entry.
	NextReplicaAddress string
	// Options holds every other key verbatim (never nil): the provider's
	// settings such as project, region, zone or aws_region.
	Options map[string]string
}

// ParseQuery reads all of r and parses it as exactly one JSON object whose
// values are all strings. It refuses, with an error naming what is wrong:
// empty input, anything but an object at the top level, a value that is not
// a string (naming the key and its JSON type), a key given twice, and any
// data after the object. Errors are single-line sentences.
func ParseQuery(r io.Reader) (Query, error) {
	q := Query{Options: map[string]string{}}
	data, err := io.ReadAll(io.LimitReader(r, MaxQuerySize+1))
	if err != nil {
		return q, fmt.Errorf("read the query from stdin: %v", err)
	}
	if len(data) > MaxQuerySize {
		return q, fmt.Errorf("the query on stdin is larger than %d bytes; expected one small JSON object of strings", MaxQuerySize)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return q, errors.New("stdin is empty; expected one JSON object whose values are strings (the data source's query, {} when it has none)")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return q, syntaxErr(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return q, fmt.Errorf("the query on stdin is a JSON %s, not an object; expected one JSON object whose values are strings", tokenType(tok))
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return q, syntaxErr(err)
		}
		key, ok := tok.(string)
		if !ok { // the decoder only yields string keys; be defensive
			return q, errors.New("the query on stdin is not valid JSON: an object key is not a string")
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return q, syntaxErr(err)
		}
		if seen[key] {
			return q, fmt.Errorf("query key %q is given twice; each key must appear once", key)
		}
		seen[key] = true
		var val string
		if t := rawType(raw); t != "string" {
			return q, fmt.Errorf("query key %q is a JSON %s, not a string; every value of the query must be a string", key, t)
		}
		if err := json.Unmarshal(raw, &val); err != nil {
			return q, syntaxErr(err)
		}
		switch key {
		case KeyCluster:
			q.Cluster = val
		case KeyProvider:
			q.Provider = val
		case KeyStateDir:
			q.StateDir = val
		case KeyNextReplicaName:
			q.NextReplicaName = val
		case KeyNextReplicaAddress:
			q.NextReplicaAddress = val
		default:
			q.Options[key] = val
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return q, syntaxErr(err)
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return q, fmt.Errorf("unexpected data after the JSON object on stdin (%s); expected exactly one object", oneLine(err.Error()))
		}
		return q, fmt.Errorf("unexpected data after the JSON object on stdin (a JSON %s); expected exactly one object", tokenType(tok))
	}
	return q, nil
}

func syntaxErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("the query on stdin is not valid JSON: it ends before the object is complete")
	}
	return fmt.Errorf("the query on stdin is not valid JSON: %s", oneLine(err.Error()))
}

// rawType names the JSON type of a syntactically valid value.
func rawType(raw json.RawMessage) string {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	default:
		return "number"
	}
}

func tokenType(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return "object"
		case '[':
			return "array"
		}
		return fmt.Sprintf("%q", string(t))
	case string:
		return "string"
	case json.Number, float64:
		return "number"
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}

// oneLine folds a message onto one line (the protocol wants a single line
// on stderr).
func oneLine(s string) string {
	var parts []string
	for _, l := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }) {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}

// OneLine folds an error message onto one line, for stderr.
func OneLine(s string) string { return oneLine(s) }
