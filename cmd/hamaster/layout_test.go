package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestLayoutListsEveryPackage: docs/layout.md, the map, names every
// package of the module: in a row of its own (`path`), or in the row of
// a folder above it as `rest` or `rest/` (rest: the path below that
// folder).
func TestLayoutListsEveryPackage(t *testing.T) {
	t.Parallel()
	const root = "../.."
	doc, err := os.ReadFile(filepath.Join(root, "docs", "layout.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	quoted := regexp.MustCompile("`([^`]+)`")
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(strings.Trim(line, "| "), "|")
		if !strings.HasPrefix(line, "| `") || len(cells) < 2 {
			continue
		}
		for _, m := range quoted.FindAllStringSubmatch(cells[0], -1) {
			rows[m[1]] = cells[1]
		}
	}
	var pkgs []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			// Not the module's packages: hidden folders, test data, build
			// output, the kube build's own modules.
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == "bin" || rel == "dist" || rel == "tools") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			dir := filepath.ToSlash(filepath.Dir(rel))
			if len(pkgs) == 0 || pkgs[len(pkgs)-1] != dir {
				pkgs = append(pkgs, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 20 {
		t.Fatalf("found %d packages: the walk is wrong", len(pkgs))
	}
	for _, p := range pkgs {
		if _, ok := rows[p]; ok {
			continue
		}
		listed := false
		parts := strings.Split(p, "/")
		for i := len(parts) - 1; i > 0 && !listed; i-- {
			row, ok := rows[strings.Join(parts[:i], "/")]
			rest := strings.Join(parts[i:], "/")
			listed = ok && (strings.Contains(row, "`"+rest+"`") || strings.Contains(row, "`"+rest+"/`"))
		}
		if !listed {
			t.Errorf("docs/layout.md does not list package %s (a row `%s`, or `%s` in the row of a folder above it)", p, p, parts[len(parts)-1])
		}
	}
}
