// Package auth knows who is calling: the signed-in user in the request context,
// bearer tokens (random, stored only as SHA-256) and the HTTP middleware that
// resolves the Authorization header.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"math"
	"net/http"
	"strings"
	"time"

	"taskflow/errs"
	"taskflow/store"
)

type userKey struct{}

// WithUser returns ctx carrying the signed-in user.
func WithUser(ctx context.Context, u *store.User) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// UserFrom returns the signed-in user of ctx, or nil when the call is anonymous.
func UserFrom(ctx context.Context) *store.User {
	u, _ := ctx.Value(userKey{}).(*store.User)
	return u
}

// RequireUser returns the signed-in user, or errs.ErrUnauthenticated.
func RequireUser(ctx context.Context) (*store.User, error) {
	if u := UserFrom(ctx); u != nil {
		return u, nil
	}
	return nil, errs.ErrUnauthenticated
}

type tokenKey struct{}

// TokenFrom returns the bearer token of the request, or "".
func TokenFrom(ctx context.Context) string {
	t, _ := ctx.Value(tokenKey{}).(string)
	return t
}

// NewToken returns a new random bearer token (256 bits, URL-safe base64).
func NewToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// HashToken returns the SHA-256 of a token: the only form the database keeps.
func HashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// Bearer returns the token of an "Authorization: Bearer <token>" header (the
// scheme in any case); ok is false when the header is present but not of that
// form.
func Bearer(r *http.Request) (token string, ok bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", true
	}
	scheme, tok, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// Guard bounds the bearer tokens a client may present that turn out not to
// be valid (package ratelimit implements it per client network). Both
// methods take the request context, which names the client (reqinfo).
type Guard interface {
	// Blocked reports whether the client of ctx is refused any lookup of a
	// token this instance does not know to be valid, and for how long; it
	// must answer without a round trip.
	Blocked(ctx context.Context) (retryAfter time.Duration, blocked bool)
	// Failed charges the client of ctx for a token that was not valid, and
	// reports whether the client is now refused, and for how long.
	Failed(ctx context.Context) (retryAfter time.Duration, refused bool)
}

// Middleware resolves the bearer token into the request context. A missing header
// is anonymous; a malformed, unknown, expired or revoked token, or a client
// guard refuses (RATE_LIMITED, see Authenticate), is answered by onInvalid
// (the transport writes UNAUTHENTICATED or 429) and goes no further. guard
// may be nil: no bound.
func Middleware(db *store.DB, guard Guard, onInvalid func(w http.ResponseWriter, r *http.Request, err error)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tok, ok := Bearer(r)
			if !ok {
				onInvalid(w, r, store.ErrInvalidToken)
				return
			}
			if tok == "" {
				next.ServeHTTP(w, r)
				return
			}
			ctx, err := Authenticate(r.Context(), db, guard, tok)
			if err != nil {
				onInvalid(w, r, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

// Authenticate returns ctx carrying the user of the bearer token tok, and
// the token (TokenFrom). A malformed, unknown, expired or revoked token is
// store.ErrInvalidToken (UNAUTHENTICATED), charged to the client through
// guard (nil: no bound); a client guard refuses is a RATE_LIMITED *errs.Error
// with extensions.retryAfter (whole seconds), and what this instance does not
// know of its token is then not read at all. A token this instance remembers
// as valid is never charged nor refused, and asks guard nothing. A failure to
// read the token is returned as it is.
func Authenticate(ctx context.Context, db *store.DB, guard Guard, tok string) (context.Context, error) {
	hash := HashToken(tok)
	u, known := db.CachedUserByTokenHash(hash)
	if u == nil && guard != nil {
		if retry, blocked := guard.Blocked(ctx); blocked {
			return ctx, TooManyBadTokens(retry)
		}
	}
	if !known {
		var err error
		if u, err = db.UserByTokenHash(ctx, hash); err != nil && errs.CodeOf(err) != errs.CodeNotFound {
			return ctx, err
		}
	}
	if u == nil {
		if guard != nil {
			if retry, refused := guard.Failed(ctx); refused {
				return ctx, TooManyBadTokens(retry)
			}
		}
		return ctx, store.ErrInvalidToken
	}
	return context.WithValue(WithUser(ctx, u), tokenKey{}, tok), nil
}

// TooManyBadTokens is the RATE_LIMITED error of a client refused for the
// invalid tokens it sent: extensions.retryAfter is retry in whole seconds,
// rounded up, at least 1.
func TooManyBadTokens(retry time.Duration) *errs.Error {
	return &errs.Error{Code: errs.CodeRateLimited,
		Message:    "too many invalid bearer tokens from your network: retry later",
		Extensions: map[string]any{"retryAfter": max(int(math.Ceil(retry.Seconds())), 1)}}
}

// ErrNoToken is returned by operations that need the request's token (logout)
// when there is none.
var ErrNoToken = errors.New("no bearer token")
