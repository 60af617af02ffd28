package gcefake

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// apiVersion is the google.golang.org/api version whose discovery
// documents the fake checks requests against (the one go.mod pins).
const apiVersion = "v0.310.0"

// discovery is one API's discovery document, reduced to what the fake
// needs: method routing and request schemas.
type discovery struct {
	methods []method
	schemas map[string]*schema
}

type method struct {
	id         string
	httpMethod string
	segs       []string // path template split on '/', params as "{name}"
	request    string   // request schema name, "" when there is no body
}

type schema struct {
	ID                   string             `json:"id"`
	Type                 string             `json:"type"`
	Ref                  string             `json:"$ref"`
	Format               string             `json:"format"`
	Enum                 []string           `json:"enum"`
	Properties           map[string]*schema `json:"properties"`
	Items                *schema            `json:"items"`
	AdditionalProperties *schema            `json:"additionalProperties"`
}

type rawDoc struct {
	ServicePath string                     `json:"servicePath"`
	Schemas     map[string]*schema         `json:"schemas"`
	Resources   map[string]json.RawMessage `json:"resources"`
}

type rawResource struct {
	Methods map[string]struct {
		ID         string `json:"id"`
		HTTPMethod string `json:"httpMethod"`
		Path       string `json:"path"`
		Request    *struct {
			Ref string `json:"$ref"`
		} `json:"request"`
	} `json:"methods"`
	Resources map[string]json.RawMessage `json:"resources"`
}

// apiDir finds google.golang.org/api in the module cache (dir overrides).
func apiDir(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMODCACHE: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "google.golang.org", "api@"+apiVersion), nil
}

// loadDiscovery reads rel (e.g. compute/v1/compute-api.json) under dir.
func loadDiscovery(dir, rel string) (*discovery, error) {
	b, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		return nil, fmt.Errorf("discovery document: %w", err)
	}
	var doc rawDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("discovery document %s: %w", rel, err)
	}
	d := &discovery{schemas: doc.Schemas}
	var walk func(res map[string]json.RawMessage) error
	walk = func(res map[string]json.RawMessage) error {
		for _, raw := range res {
			var r rawResource
			if err := json.Unmarshal(raw, &r); err != nil {
				return err
			}
			for _, m := range r.Methods {
				mm := method{id: m.ID, httpMethod: m.HTTPMethod, segs: strings.Split(strings.TrimPrefix(doc.ServicePath+m.Path, "/"), "/")}
				if m.Request != nil {
					mm.request = m.Request.Ref
				}
				d.methods = append(d.methods, mm)
			}
			if err := walk(r.Resources); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(doc.Resources); err != nil {
		return nil, fmt.Errorf("discovery document %s: %w", rel, err)
	}
	// Literal segments beat parameters: sort so that templates with more
	// literals are tried first.
	sort.Slice(d.methods, func(i, j int) bool { return literals(d.methods[i].segs) > literals(d.methods[j].segs) })
	return d, nil
}

func literals(segs []string) int {
	n := 0
	for _, s := range segs {
		if !strings.HasPrefix(s, "{") {
			n++
		}
	}
	return n
}

// route finds the method for an HTTP method and path and its parameters.
func (d *discovery) route(httpMethod, path string) (method, map[string]string, bool) {
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for _, m := range d.methods {
		if m.httpMethod != httpMethod || len(m.segs) != len(segs) {
			continue
		}
		params := map[string]string{}
		ok := true
		for i, s := range m.segs {
			if strings.HasPrefix(s, "{") {
				params[strings.Trim(s, "{}+")] = segs[i]
			} else if s != segs[i] {
				ok = false
				break
			}
		}
		if ok {
			return m, params, true
		}
	}
	return method{}, nil, false
}

// validate checks a decoded JSON body against a schema: every field must
// be declared and of the declared type, as the real API rejects unknown
// names with 400.
func (d *discovery) validate(v any, s *schema, at string) *apiError {
	if s == nil {
		return nil
	}
	if s.Ref != "" {
		ref, ok := d.schemas[s.Ref]
		if !ok {
			return errf(400, "invalid", "at '%s': schema %s unknown", at, s.Ref)
		}
		return d.validate(v, ref, at)
	}
	if v == nil {
		return nil
	}
	switch s.Type {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return errf(400, "invalid", "Invalid value at '%s': want an object", at)
		}
		for k, fv := range obj {
			var ps *schema
			if s.Properties != nil {
				ps = s.Properties[k]
			}
			if ps == nil {
				ps = s.AdditionalProperties
			}
			if ps == nil {
				return errf(400, "invalid", "Invalid JSON payload received. Unknown name %q at '%s': Cannot find field.", k, at)
			}
			if err := d.validate(fv, ps, at+"."+k); err != nil {
				return err
			}
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return errf(400, "invalid", "Invalid value at '%s': want a list", at)
		}
		for i, e := range arr {
			if err := d.validate(e, s.Items, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return errf(400, "invalid", "Invalid value at '%s' (TYPE_STRING): %v", at, v)
		}
		if len(s.Enum) > 0 && !contains(s.Enum, str) {
			return errf(400, "invalid", "Invalid value at '%s': %q is not one of %v", at, str, s.Enum)
		}
	case "integer", "number":
		switch x := v.(type) {
		case float64:
		case string:
			if s.Format != "int64" && s.Format != "uint64" {
				return errf(400, "invalid", "Invalid value at '%s' (TYPE_INT32): %q", at, x)
			}
		default:
			return errf(400, "invalid", "Invalid value at '%s': want a number", at)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return errf(400, "invalid", "Invalid value at '%s' (TYPE_BOOL): %v", at, v)
		}
	}
	return nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
