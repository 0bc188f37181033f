package querydoc

import (
	"context"
	"testing"

	"github.com/99designs/gqlgen/graphql"

	"github.com/vektah/gqlparser/v2/ast"
)

// secretTexts are documents of TaskFlow's schema and whether they write a
// value marked @secret in their text.
var secretTexts = map[string]bool{
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
}

func TestSecretIn(t *testing.T) {
	t.Parallel()
	v := NewValidator(taskflowSchema, DefaultLimits)
	for text, want := range secretTexts {
		doc, _, errs := v.Prepare(text)
		if errs != nil {
			t.Fatalf("%s: %v", text, errs)
		}
		if got := SecretIn(doc); got != want {
			t.Errorf("SecretIn(%s) = %v, want %v", text, got, want)
		}
	}
}

// HoldsSecret answers what SecretIn found when Extension validated the
// document, for the operation that sent it and for every operation that
// takes it from the Cache: the document is not walked again. The cached
// document's literal is made null behind the cache's back, which a new walk
// would see (SecretIn is false then), and HoldsSecret still answers what was
// found.
func TestHoldsSecretIsFoundOncePerDocument(t *testing.T) {
	t.Parallel()
	e := Extension{Validator: NewValidator(taskflowSchema, DefaultLimits), Cache: NewCache(0)}
	for text, want := range secretTexts {
		rc := validated(t, e, text)
		if got := HoldsSecret(rc); got != want {
			t.Errorf("HoldsSecret(%s) = %v, want %v", text, got, want)
		}
	}
	const text = `mutation { login(email: "a@b.c", password: "hunter2") { token } }`
	rc := validated(t, e, text)
	password := rc.Doc.Operations[0].SelectionSet[0].(*ast.Field).Arguments.ForName("password")
	password.Value.Kind = ast.NullValue
	if SecretIn(rc.Doc) {
		t.Fatal("SecretIn finds a secret in a null")
	}
	if !HoldsSecret(validated(t, e, text)) {
		t.Error("HoldsSecret of the cached document walked it again: it found no secret")
	}
}

// validated runs Extension on query and returns the operation context with
// the document it validated, as the operation context mutators see it.
func validated(t *testing.T, e Extension, query string) *graphql.OperationContext {
	t.Helper()
	rc := &graphql.OperationContext{}
	ctx := graphql.WithOperationContext(context.Background(), rc)
	if err := e.MutateOperationParameters(ctx, &graphql.RawParams{Query: query}); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	rc.Doc = preparedOf(rc).doc
	return rc
}
