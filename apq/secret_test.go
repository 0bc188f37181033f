package apq_test

import (
	"regexp"
	"slices"
	"testing"

	"taskflow/apq"
	"taskflow/schema"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
)

// TestSecretsAreMarked checks the schema against the rule: every argument
// and input field whose name says it carries a password, a secret or a token
// is marked @secret, and the marked ones are exactly these.
func TestSecretsAreMarked(t *testing.T) {
	t.Parallel()
	s, err := schema.Load()
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`(?i)password|secret|token`)
	var marked []string
	check := func(where, name string, d ast.DirectiveList) {
		isSecret := d.ForName(apq.SecretDirective) != nil
		if isSecret {
			marked = append(marked, where)
		}
		if named.MatchString(name) && !isSecret {
			t.Errorf("%s carries a secret by its name and is not marked @%s", where, apq.SecretDirective)
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
		t.Errorf("marked @%s: %v, want %v", apq.SecretDirective, marked, want)
	}
}

func TestHoldsSecret(t *testing.T) {
	t.Parallel()
	s, err := schema.Load()
	if err != nil {
		t.Fatal(err)
	}
	for text, want := range map[string]bool{
		`mutation { login(email: "a@b.c", password: "hunter2") { token } }`:                                             true,
		`mutation($e: String!, $p: String!) { login(email: $e, password: $p) { token } }`:                               false,
		`mutation($e: String!) { login(email: $e, password: "hunter2") { token } }`:                                     true,
		`mutation($p: String! = "hunter2") { login(email: "a@b.c", password: $p) { token } }`:                           true,
		`mutation($p: String!) { login(email: "a@b.c", password: $p) { token } }`:                                       false,
		`mutation { register(input: {email: "a@b.c", password: "hunter2", name: "A"}) { token } }`:                      true,
		`mutation($in: RegisterInput!) { register(input: $in) { token } }`:                                              false,
		`mutation($p: String!) { register(input: {email: "a@b.c", password: $p, name: "A"}) { token } }`:                false,
		`mutation($in: RegisterInput! = {email: "a@b.c", password: "x", name: "A"}) { register(input: $in) { token } }`: true,
		// Another operation of the same text, run by its name with the stored hash.
		`query Me { me { id } } mutation Login { login(email: "a@b.c", password: "hunter2") { token } }`: true,
		// In a fragment, and as a fragment's variable's default.
		`mutation { ...L } fragment L on Mutation { login(email: "a@b.c", password: "hunter2") { token } }`:             true,
		`mutation($p: String! = "x") { ...L } fragment L on Mutation { login(email: "a@b.c", password: $p) { token } }`: true,
		`mutation { createWorkspace(input: {name: "hunter2"}) { id } }`:                                                 false,
		`{ me { id } }`: false,
	} {
		doc, gerr := gqlparser.LoadQuery(s, text)
		if gerr != nil {
			t.Fatalf("%s: %v", text, gerr)
		}
		if got := apq.HoldsSecret(s, doc); got != want {
			t.Errorf("HoldsSecret(%s) = %v, want %v", text, got, want)
		}
	}
}
