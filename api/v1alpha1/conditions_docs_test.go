package v1alpha1

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestEveryReasonIsDocumented: each condition type and each condition reason declared in
// conditions.go has its place in docs/troubleshooting.md (a "## " heading that names the
// condition, a "### " heading that is the reason), so that no reason ships without
// saying what it means and what to do.
func TestEveryReasonIsDocumented(t *testing.T) {
	conditions, reasons := conditionConstants(t)
	if len(conditions) < 8 || len(reasons) < 40 {
		t.Fatalf("found %d condition types and %d reasons in conditions.go: has the way they are declared changed?", len(conditions), len(reasons))
	}
	doc, err := os.ReadFile("../../docs/troubleshooting.md")
	if err != nil {
		t.Fatal(err)
	}
	sections, entries := map[string]bool{}, map[string]bool{}
	word := regexp.MustCompile(`[A-Za-z]+`)
	for _, line := range strings.Split(string(doc), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			for _, w := range word.FindAllString(line, -1) {
				sections[w] = true
			}
		case strings.HasPrefix(line, "### "):
			entries[strings.TrimSpace(strings.TrimPrefix(line, "### "))] = true
		}
	}
	for name, value := range conditions {
		if !sections[value] {
			t.Errorf("%s (%q) has no section in docs/troubleshooting.md: add a \"## %s\" heading", name, value, value)
		}
	}
	for name, value := range reasons {
		if !entries[value] {
			t.Errorf("%s (%q) is not in docs/troubleshooting.md: add a \"### %s\" entry under its condition (what it means, what isochron does, what the user does)", name, value, value)
		}
	}
}

// conditionConstants returns the Condition* and Reason* string constants of
// conditions.go, by name (Event reasons, EventReason*, are not conditions').
func conditionConstants(t *testing.T) (conditions, reasons map[string]string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "conditions.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	conditions, reasons = map[string]string{}, map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case strings.HasPrefix(n.Name, "Condition"):
					conditions[n.Name] = v
				case strings.HasPrefix(n.Name, "Reason"):
					reasons[n.Name] = v
				}
			}
		}
	}
	return conditions, reasons
}
