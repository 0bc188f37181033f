package httpapi

import (
	"context"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql/errcode"

	"taskflow/errs"
)

// TestContractErrorCodes keeps the error table of docs/api.md equal to the
// codes the error presenter can emit (errs.All), in both directions.
func TestContractErrorCodes(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "\n## Errors\n")
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([A-Z_]+)` \\|")
	var documented []string
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		documented = append(documented, m[1])
	}
	if len(documented) == 0 {
		t.Fatal("no error table under '## Errors' in docs/api.md")
	}
	var known []string
	for _, c := range errs.All() {
		known = append(known, string(c))
	}
	for _, c := range known {
		if !slices.Contains(documented, c) {
			t.Errorf("the presenter can emit %s, which docs/api.md#errors does not list", c)
		}
	}
	for _, c := range documented {
		if !slices.Contains(known, c) {
			t.Errorf("docs/api.md#errors lists %s, which the presenter never emits (not in errs.All)", c)
		}
	}
	// gqlgen writes its own codes; they must be the contract's.
	if errcode.ParseFailed != string(errs.CodeGraphQLParseFailed) || errcode.ValidationFailed != string(errs.CodeGraphQLValidationFailed) {
		t.Errorf("gqlgen's codes %s, %s differ from errs'", errcode.ParseFailed, errcode.ValidationFailed)
	}
}

// TestPresenterShowsUnknownCodesAsInternal: a code outside the contract is a
// bug, never shown to a client.
func TestPresenterShowsUnknownCodesAsInternal(t *testing.T) {
	t.Parallel()
	present := presentError(slog.New(slog.NewTextHandler(io.Discard, nil)))
	got := present(context.Background(), &errs.Error{Code: "SOMETHING_NEW", Message: "details of the bug"})
	if got.Extensions["code"] != string(errs.CodeInternal) || got.Message != "internal error" {
		t.Fatalf("unknown code presented as %v %q", got.Extensions, got.Message)
	}
	for _, c := range errs.All() {
		got := present(context.Background(), errs.Errorf(c, "m"))
		if got.Extensions["code"] != string(c) {
			t.Errorf("%s presented as %v", c, got.Extensions["code"])
		}
	}
}
