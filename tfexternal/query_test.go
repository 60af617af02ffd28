package tfexternal

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseQuery(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   string
		want Query
	}{
		{"empty object (no query block)", `{}`, Query{Options: map[string]string{}}},
		{"whitespace around", " \n\t{ }\r\n ", Query{Options: map[string]string{}}},
		{"known keys", `{"cluster":"prod","provider":"local","state_dir":"/var/lib/hm","next_replica_name":"prod-master-abc","next_replica_address":"10.0.0.7"}`,
			Query{Cluster: "prod", Provider: "local", StateDir: "/var/lib/hm", NextReplicaName: "prod-master-abc", NextReplicaAddress: "10.0.0.7", Options: map[string]string{}}},
		{"provider settings kept verbatim", `{"cluster":"c","project":"p-1","region":"europe-west1","zone":"europe-west1-b","aws_region":"eu-west-1"}`,
			Query{Cluster: "c", Options: map[string]string{"project": "p-1", "region": "europe-west1", "zone": "europe-west1-b", "aws_region": "eu-west-1"}}},
		{"empty strings count as absent", `{"cluster":"","provider":"","state_dir":""}`, Query{Options: map[string]string{}}},
		{"escapes and unicode", `{"x":"a\"b\\c\u00e9\n","\u0063luster":"c"}`, Query{Cluster: "c", Options: map[string]string{"x": "a\"b\\cé\n"}}},
		{"what hashicorp/external sends (HTML-escaped)", `{"q":"\u003ca\u0026b\u003e"}`, Query{Options: map[string]string{"q": "<a&b>"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseQuery(strings.NewReader(c.in))
			if err != nil {
				t.Fatalf("ParseQuery(%q): %v", c.in, err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("ParseQuery(%q)\n got %#v\nwant %#v", c.in, got, c.want)
			}
		})
	}
}

func TestParseQueryErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   string
		want []string // substrings of the error
	}{
		{"empty input", ``, []string{"stdin is empty"}},
		{"blank input", " \n\t", []string{"stdin is empty"}},
		{"malformed", `{"cluster":`, []string{"not valid JSON"}},
		{"malformed key", `{cluster:"x"}`, []string{"not valid JSON"}},
		{"trailing comma", `{"a":"b",}`, []string{"not valid JSON"}},
		{"unclosed", `{"a":"b"`, []string{"not valid JSON"}},
		{"number", `{"cluster":3}`, []string{`"cluster"`, "JSON number"}},
		{"float", `{"n":1.5e3}`, []string{`"n"`, "JSON number"}},
		{"true", `{"yes":true}`, []string{`"yes"`, "JSON boolean"}},
		{"false", `{"yes":false}`, []string{`"yes"`, "JSON boolean"}},
		{"null", `{"dns_name":null}`, []string{`"dns_name"`, "JSON null"}},
		{"nested object", `{"tags":{"a":"b"}}`, []string{`"tags"`, "JSON object"}},
		{"array", `{"zones":["a","b"]}`, []string{`"zones"`, "JSON array"}},
		{"top-level array", `["a"]`, []string{"JSON array, not an object"}},
		{"top-level string", `"cluster"`, []string{"JSON string, not an object"}},
		{"top-level number", `42`, []string{"JSON number, not an object"}},
		{"top-level null", `null`, []string{"JSON null, not an object"}},
		{"two objects", `{}{}`, []string{"after the JSON object", "object"}},
		{"trailing garbage", `{"cluster":"a"} x`, []string{"after the JSON object"}},
		{"trailing brace", `{}}`, []string{"after the JSON object"}},
		{"trailing string", `{} "x"`, []string{"after the JSON object", "string"}},
		{"duplicate key", `{"cluster":"a","cluster":"b"}`, []string{`"cluster"`, "twice"}},
		{"key with newline is quoted", `{"a\nb":1}`, []string{`"a\nb"`, "JSON number"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseQuery(strings.NewReader(c.in))
			if err == nil {
				t.Fatalf("ParseQuery(%q) succeeded, want an error", c.in)
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("ParseQuery(%q) error %q does not contain %q", c.in, msg, w)
				}
			}
			if strings.ContainsAny(msg, "\r\n") {
				t.Errorf("error is not one line: %q", msg)
			}
		})
	}
}

func TestParseQueryTooLarge(t *testing.T) {
	t.Parallel()
	big := `{"x":"` + strings.Repeat("a", MaxQuerySize) + `"}`
	if _, err := ParseQuery(strings.NewReader(big)); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("err = %v", err)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("boom\nsecond line") }

func TestParseQueryReadError(t *testing.T) {
	t.Parallel()
	_, err := ParseQuery(failingReader{})
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("err = %v", err)
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	if got := OneLine("a\n  b\r\n\nc  d \n"); got != "a b c  d" {
		t.Fatalf("OneLine = %q", got)
	}
}

// FuzzParseQuery: ParseQuery never panics; what it accepts is exactly a JSON
// object of strings (encoding/json agrees, value for value); its errors are
// one non-empty line.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{
		``, `{}`, ` {} `, `{"cluster":"prod","provider":"local","state_dir":"/x"}`,
		`{"project":"p","region":"r","zone":"z","aws_region":"a"}`,
		`{"cluster":3}`, `{"a":null}`, `{"a":true}`, `{"a":{}}`, `{"a":[]}`, `[]`, `"s"`, `null`,
		`{}{}`, `{} x`, `{"a":"b","a":"c"}`, `{"a":"\u00e9\ud83d\ude00"}`, `{"a":"\ud800"}`,
		"{\"a\":\"\xff\"}", `{"a":"b"`, `{"a"`, `{`, `}`, `{"next_replica_address":"10.0.0.1"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		q, err := ParseQuery(strings.NewReader(string(data)))
		if err != nil {
			msg := err.Error()
			if msg == "" || strings.ContainsAny(msg, "\r\n") {
				t.Fatalf("error for %q is not one non-empty line: %q", data, msg)
			}
			return
		}
		if q.Options == nil {
			t.Fatal("Options is nil")
		}
		var ref map[string]string
		if err := json.Unmarshal(data, &ref); err != nil {
			t.Fatalf("ParseQuery accepted %q, encoding/json refuses it as an object of strings: %v", data, err)
		}
		if ref == nil {
			t.Fatalf("ParseQuery accepted %q, which is not an object", data)
		}
		got := map[string]string{}
		for k, v := range q.Options {
			got[k] = v
		}
		for k, v := range map[string]string{KeyCluster: q.Cluster, KeyProvider: q.Provider, KeyStateDir: q.StateDir, KeyNextReplicaName: q.NextReplicaName, KeyNextReplicaAddress: q.NextReplicaAddress} {
			if _, inOptions := q.Options[k]; inOptions {
				t.Fatalf("known key %q landed in Options", k)
			}
			if v != "" {
				got[k] = v
			}
		}
		for k, v := range ref {
			if v == "" {
				switch k {
				case KeyCluster, KeyProvider, KeyStateDir, KeyNextReplicaName, KeyNextReplicaAddress:
					continue // "" is "absent" for known keys
				}
			}
			if got[k] != v {
				t.Fatalf("key %q: ParseQuery %q, encoding/json %q (input %q)", k, got[k], v, data)
			}
		}
		if len(got) > len(ref) {
			t.Fatalf("ParseQuery found keys encoding/json did not: %v vs %v", got, ref)
		}
		for k, v := range got {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				t.Fatalf("invalid UTF-8 passed through: %q=%q", k, v)
			}
		}
	})
}
