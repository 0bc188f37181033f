package apq_test

import (
	"regexp"
	"slices"
	"testing"

	"taskflow/querydoc"
	"taskflow/schema"

	"github.com/vektah/gqlparser/v2/ast"
)

// TestSecretsAreMarked checks the schema against the rule: every argument
// and input field whose name says it carries a password, a secret or a token
// is marked @secret, and the marked ones are exactly these. Which texts
// hold a secret is querydoc's TestSecretIn.
func TestSecretsAreMarked(t *testing.T) {
	t.Parallel()
	s, err := schema.Load()
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`(?i)password|secret|token`)
	var marked []string
	check := func(where, name string, d ast.DirectiveList) {
		isSecret := d.ForName(querydoc.SecretDirective) != nil
		if isSecret {
			marked = append(marked, where)
		}
		if named.MatchString(name) && !isSecret {
			t.Errorf("%s carries a secret by its name and is not marked @%s", where, querydoc.SecretDirective)
		}
	}
	for _, def := range s.Types {
		if def.BuiltIn {
			continue
		}
		for _, f := range def.Fields {
			if def.Kind == ast.InputObject {
				check(def.Name+"."+f.Name, f.Name, f.Directives)
			}
			for _, a := range f.Arguments {
				check(def.Name+"."+f.Name+"("+a.Name+")", a.Name, a.Directives)
			}
		}
	}
	slices.Sort(marked)
	if want := []string{"Mutation.login(password)", "RegisterInput.password"}; !slices.Equal(marked, want) {
		t.Errorf("marked @%s: %v, want %v", querydoc.SecretDirective, marked, want)
	}
}
