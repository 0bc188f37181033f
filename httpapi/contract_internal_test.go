package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/jackc/pgx/v5/pgconn"

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

// A request whose client went away fails with the cancellation (pgx returns
// the context's error, or a network error of the cancelled statement): no
// bug, and nobody reads the answer. It was INTERNAL, logged at ERROR, so
// every client that gave up mid-request paged the operator; it is now
// UNAVAILABLE (also the truth when a shutdown ends the request: retry on
// another instance), logged at INFO. An error that is neither, with the
// client gone, is still a bug.
func TestPresenterClientGoneIsNoBug(t *testing.T) {
	t.Parallel()
	var logged strings.Builder
	present := presentError(slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug})))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, err := range []error{context.Canceled, fmt.Errorf("read: %w", context.Canceled),
		&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}} {
		logged.Reset()
		got := present(ctx, err)
		if got.Extensions["code"] != string(errs.CodeUnavailable) {
			t.Errorf("%v with the client gone: presented as %v", err, got.Extensions["code"])
		}
		if !strings.Contains(logged.String(), "level=INFO") || strings.Contains(logged.String(), "level=ERROR") {
			t.Errorf("%v with the client gone: logged %q, want one INFO line", err, logged.String())
		}
	}
	logged.Reset()
	if got := present(ctx, errors.New("a bug")); got.Extensions["code"] != string(errs.CodeInternal) ||
		!strings.Contains(logged.String(), "level=ERROR") {
		t.Errorf("a bug with the client gone: presented as %v, logged %q", got.Extensions["code"], logged.String())
	}
}

// A statement cut short by the operation's time bound (REQUEST_TIMEOUT) is
// TIMEOUT, logged at WARN when the operation ends, never INTERNAL nor
// UNAVAILABLE; a client that went away before the bound stays UNAVAILABLE
// at INFO (the cancellation comes first), and an error that is not the
// cancellation stays what it is past the bound.
func TestPresenterTimeout(t *testing.T) {
	t.Parallel()
	var logged strings.Builder
	present := presentError(slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug})))
	canceled := &pgconn.PgError{Code: "57014", Message: "canceling statement due to user request"}
	for _, err := range []error{canceled, fmt.Errorf("update: %w", canceled), context.DeadlineExceeded} {
		logged.Reset()
		timedOut, end := withRequestTimeout(context.Background(), time.Nanosecond)
		<-timedOut.Done()
		if got := present(timedOut, err); got.Extensions["code"] != string(errs.CodeTimeout) || got.Extensions["retryAfter"] != nil {
			t.Errorf("%v past the bound: presented as %v", err, got.Extensions)
		}
		if logged.Len() != 0 {
			t.Errorf("%v past the bound: logged %q before the operation ended", err, logged.String())
		}
		end()
		if l := logged.String(); strings.Count(l, "\n") != 1 || !strings.Contains(l, "level=WARN") || !strings.Contains(l, "fields=1") {
			t.Errorf("%v past the bound: logged %q, want one WARN line", err, l)
		}
	}
	timedOut, cancel := withRequestTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-timedOut.Done()
	// The client went away first: its cancellation is the cause.
	gone, leave := context.WithCancel(context.Background())
	bounded, cancel2 := withRequestTimeout(gone, time.Hour)
	defer cancel2()
	leave()
	logged.Reset()
	if got := present(bounded, canceled); got.Extensions["code"] != string(errs.CodeUnavailable) ||
		!strings.Contains(logged.String(), "level=INFO") {
		t.Errorf("client gone under the bound: presented as %v, logged %q", got.Extensions["code"], logged.String())
	}
	// Not the cancellation: a failure of the moment, and a bug.
	if got := present(timedOut, &pgconn.PgError{Code: "40P01"}); got.Extensions["code"] != string(errs.CodeUnavailable) {
		t.Errorf("a deadlock past the bound: presented as %v", got.Extensions["code"])
	}
	if got := present(timedOut, errors.New("a bug")); got.Extensions["code"] != string(errs.CodeInternal) {
		t.Errorf("a bug past the bound: presented as %v", got.Extensions["code"])
	}
}
