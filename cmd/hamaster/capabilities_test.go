package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCapabilitiesResolvedOnce: a provider's or a flavor's optional
// interfaces are asserted in one place each, providers.CapabilitiesOf
// and flavors.CapabilitiesOf (providers/capabilities*.go,
// flavors/capabilities*.go); everything else checks a capability
// (docs/contract.md). It scans the module's Go files, tests aside, for a
// type assertion or a type switch case naming an interface of package
// providers or flavors (qualified, or unqualified inside the package), an
// interface of another package that embeds one (kubeadm.Machine), or an
// interface literal with a method of one. Every optional interface of
// those packages must be a field of its Capabilities.
func TestCapabilitiesResolvedOnce(t *testing.T) {
	t.Parallel()
	const root = "../.."
	const module = "github.com/hamaster/hamaster/"
	seams := map[string]bool{"providers": true, "flavors": true}
	fset := token.NewFileSet()
	files := map[string]*ast.File{} // by path relative to root
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == "bin" || rel == "dist" || rel == "tools") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files[rel] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// The seams' interfaces, and the method names of those a literal
	// could stand for (the mandatory ones aside: their methods are
	// called, not probed).
	ifaces := map[string]map[string]bool{"providers": {}, "flavors": {}}
	methods := map[string]string{}
	mandatory := map[string]bool{"Provider": true, "Instances": true, "Flavor": true, "Format": true}
	for rel, f := range files {
		dir := filepath.ToSlash(filepath.Dir(rel))
		if !seams[dir] {
			continue
		}
		for name, it := range interfaceTypes(f) {
			ifaces[dir][name] = true
			if mandatory[name] {
				continue
			}
			for _, m := range it.Methods.List {
				for _, n := range m.Names {
					methods[n.Name] = dir + "." + name
				}
			}
		}
	}
	if len(ifaces["providers"]) < 10 || len(ifaces["flavors"]) < 10 {
		t.Fatalf("found %d providers and %d flavors interfaces: the scan is wrong", len(ifaces["providers"]), len(ifaces["flavors"]))
	}
	// Each optional interface is a field of its seam's Capabilities.
	for seam, names := range ifaces {
		fields := map[string]bool{}
		for rel, f := range files {
			if filepath.ToSlash(filepath.Dir(rel)) == seam {
				for _, n := range structFields(f, "Capabilities") {
					fields[n] = true
				}
			}
		}
		for name := range names {
			if !mandatory[name] && !fields[name] {
				t.Errorf("%s.Capabilities has no field for %s.%s: CapabilitiesOf resolves every optional interface", seam, seam, name)
			}
		}
	}

	// seamOf names the seam interface typ is, "" for none: pkg is the
	// file's package folder, imports its import names.
	seamOf := func(typ ast.Expr, pkg string, imports map[string]string) string {
		switch x := typ.(type) {
		case *ast.Ident:
			if seams[pkg] && ifaces[pkg][x.Name] {
				return pkg + "." + x.Name
			}
		case *ast.SelectorExpr:
			if id, ok := x.X.(*ast.Ident); ok && seams[imports[id.Name]] && ifaces[imports[id.Name]][x.Sel.Name] {
				return imports[id.Name] + "." + x.Sel.Name
			}
		}
		return ""
	}
	// embedded is the seam interface it embeds, or whose method it
	// names, "" for none.
	embedded := func(it *ast.InterfaceType, pkg string, imports map[string]string) string {
		for _, m := range it.Methods.List {
			if len(m.Names) == 0 {
				if s := seamOf(m.Type, pkg, imports); s != "" {
					return s
				}
			}
			for _, n := range m.Names {
				if s, ok := methods[n.Name]; ok {
					return s
				}
			}
		}
		return ""
	}

	// Interfaces outside the seams that embed one of theirs, by package
	// folder.
	local := map[string]map[string]string{}
	for rel, f := range files {
		dir := filepath.ToSlash(filepath.Dir(rel))
		imports := importNames(f, module)
		for name, it := range interfaceTypes(f) {
			if seams[dir] {
				continue
			}
			for _, m := range it.Methods.List {
				if s := seamOf(m.Type, dir, imports); len(m.Names) == 0 && s != "" {
					if local[dir] == nil {
						local[dir] = map[string]string{}
					}
					local[dir][name] = s
				}
			}
		}
	}

	sites := 0
	for rel, f := range files {
		dir := filepath.ToSlash(filepath.Dir(rel))
		if seams[dir] && strings.HasPrefix(filepath.Base(rel), "capabilities") {
			continue
		}
		imports := importNames(f, module)
		check := func(typ ast.Expr, at token.Pos) {
			s := seamOf(typ, dir, imports)
			if id, ok := typ.(*ast.Ident); ok && s == "" && local[dir][id.Name] != "" {
				s = local[dir][id.Name] + " (embedded in " + id.Name + ")"
			}
			if it, ok := typ.(*ast.InterfaceType); ok && s == "" {
				s = embedded(it, dir, imports)
			}
			if s != "" {
				sites++
				t.Errorf("%s: a type assertion on %s: check the capability (providers.CapabilitiesOf, flavors.CapabilitiesOf; workflows.Deps.ProviderCaps, FlavorCaps) instead", fset.Position(at), s)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.TypeAssertExpr:
				if x.Type != nil { // x.(type) is the switch's: its cases are checked below
					check(x.Type, x.Pos())
				}
			case *ast.TypeSwitchStmt:
				for _, c := range x.Body.List {
					for _, typ := range c.(*ast.CaseClause).List {
						check(typ, typ.Pos())
					}
				}
			}
			return true
		})
	}
	if sites > 0 {
		t.Logf("%d type assertions on a provider's or a flavor's interface outside providers/capabilities*.go and flavors/capabilities*.go", sites)
	}
}

// interfaceTypes are the interfaces f declares, by name.
func interfaceTypes(f *ast.File) map[string]*ast.InterfaceType {
	out := map[string]*ast.InterfaceType{}
	for _, ts := range typeSpecs(f) {
		if it, ok := ts.Type.(*ast.InterfaceType); ok {
			out[ts.Name.Name] = it
		}
	}
	return out
}

// structFields are the field names of the struct f declares as name.
func structFields(f *ast.File, name string) []string {
	var out []string
	for _, ts := range typeSpecs(f) {
		st, ok := ts.Type.(*ast.StructType)
		if !ok || ts.Name.Name != name {
			continue
		}
		for _, fl := range st.Fields.List {
			for _, n := range fl.Names {
				out = append(out, n.Name)
			}
		}
	}
	return out
}

// typeSpecs are the types f declares.
func typeSpecs(f *ast.File) []*ast.TypeSpec {
	var out []*ast.TypeSpec
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
			for _, s := range g.Specs {
				out = append(out, s.(*ast.TypeSpec))
			}
		}
	}
	return out
}

// importNames maps the names f imports the module's packages under to
// their folder (module stripped): "providers" → "providers".
func importNames(f *ast.File, module string) map[string]string {
	out := map[string]string{}
	for _, im := range f.Imports {
		path, err := strconv.Unquote(im.Path.Value)
		if err != nil || !strings.HasPrefix(path, module) {
			continue
		}
		dir := strings.TrimPrefix(path, module)
		name := filepath.Base(dir)
		if im.Name != nil {
			name = im.Name.Name
		}
		out[name] = dir
	}
	return out
}
