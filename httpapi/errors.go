package httpapi

import (
	"context"
	"errors"
	"log/slog"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"taskflow/errs"
	"taskflow/reqinfo"
	"taskflow/store"
)

// presentError is the one error presenter: a domain *errs.Error becomes its code
// and message (with its extensions); errors gqlgen made itself (parse,
// validation, argument coercion) keep their message with a code; anything else is
// logged with the request id and shown as INTERNAL with nothing of its internals.
// It emits only the contract's codes (errs.All): an error with another code is
// a bug, logged and shown as INTERNAL.
func presentError(log *slog.Logger) graphql.ErrorPresenterFunc {
	present := presentKnown(log)
	return func(ctx context.Context, err error) *gqlerror.Error {
		gqlErr := present(ctx, err)
		if code, _ := gqlErr.Extensions["code"].(string); !errs.Known(code) {
			return internalError(ctx, log, err, gqlErr)
		}
		return gqlErr
	}
}

// presentKnown is presentError before its check of the code.
func presentKnown(log *slog.Logger) graphql.ErrorPresenterFunc {
	return func(ctx context.Context, err error) *gqlerror.Error {
		gqlErr := graphql.DefaultErrorPresenter(ctx, err)
		var domain *errs.Error
		if errors.As(err, &domain) {
			gqlErr.Message = domain.Message
			ext := map[string]any{"code": string(domain.Code)}
			for k, v := range domain.Extensions {
				ext[k] = v
			}
			gqlErr.Extensions = ext
			return gqlErr
		}
		var orig *gqlerror.Error
		if errors.As(err, &orig) && orig.Err == nil {
			// Made by gqlgen or gqlparser: a problem with the request itself.
			if gqlErr.Extensions == nil {
				gqlErr.Extensions = map[string]any{}
			}
			if _, ok := gqlErr.Extensions["code"]; !ok {
				gqlErr.Extensions["code"] = string(errs.CodeBadUserInput)
			}
			return gqlErr
		}
		if errors.As(err, &orig) && isArgumentError(ctx, orig) {
			// An argument value gqlgen could not coerce (e.g. a bad Time): the
			// request's fault, reported with the argument's path.
			gqlErr.Extensions = map[string]any{"code": string(errs.CodeBadUserInput)}
			return gqlErr
		}
		if e := inputRefusedByPostgres(ctx, log, err); e != nil {
			gqlErr.Message = e.Message
			gqlErr.Extensions = map[string]any{"code": string(e.Code)}
			return gqlErr
		}
		return internalError(ctx, log, err, gqlErr)
	}
}

// internalError logs err with the request id and returns the INTERNAL error
// shown in its place, at gqlErr's path and locations.
func internalError(ctx context.Context, log *slog.Logger, err error, gqlErr *gqlerror.Error) *gqlerror.Error {
	log.ErrorContext(ctx, "internal error", "err", err, "request_id", reqinfo.From(ctx).RequestID,
		"path", gqlErr.Path.String())
	return &gqlerror.Error{
		Message:    "internal error",
		Path:       gqlErr.Path,
		Locations:  gqlErr.Locations,
		Extensions: map[string]any{"code": string(errs.CodeInternal)},
	}
}

// inputRefusedByPostgres is the safety net under the input checks: the
// BAD_USER_INPUT error of a value Postgres refused (store.InputError), logged
// as a warning because a check where input enters should have caught it; nil
// for any other error.
func inputRefusedByPostgres(ctx context.Context, log *slog.Logger, err error) *errs.Error {
	e, state := store.InputError(err)
	if e != nil {
		log.WarnContext(ctx, "bad input reached Postgres", "sqlstate", state, "err", err,
			"request_id", reqinfo.From(ctx).RequestID)
	}
	return e
}

// isArgumentError reports whether err was raised while coercing an argument of
// the field being resolved: gqlgen puts the argument's name (and the input
// fields below it) after the field's path, which a resolver error never has.
func isArgumentError(ctx context.Context, err *gqlerror.Error) bool {
	if !graphql.HasOperationContext(ctx) || graphql.GetFieldContext(ctx) == nil {
		return false
	}
	field := graphql.GetPath(ctx)
	if len(err.Path) <= len(field) {
		return false
	}
	for i := range field {
		if field[i] != err.Path[i] {
			return false
		}
	}
	_, named := err.Path[len(field)].(ast.PathName)
	return named
}

// recoverPanic turns a resolver panic into an internal error (logged by the presenter).
func recoverPanic(ctx context.Context, p any) error {
	return &panicError{value: p}
}

// panicError is a recovered panic.
type panicError struct{ value any }

// Error describes the panic for the log.
func (e *panicError) Error() string { return "panic: " + fmtAny(e.value) }
