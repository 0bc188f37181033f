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
	"net/http"
	"strings"

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

// Middleware resolves the bearer token into the request context. A missing header
// is anonymous; a malformed, unknown, expired or revoked token is answered by
// onInvalid (the transport writes UNAUTHENTICATED) and goes no further.
func Middleware(db *store.DB, onInvalid func(w http.ResponseWriter, r *http.Request, err error)) func(http.Handler) http.Handler {
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
			ctx, err := Authenticate(r.Context(), db, tok)
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
// store.ErrInvalidToken (UNAUTHENTICATED); a failure to read it is returned
// as it is.
func Authenticate(ctx context.Context, db *store.DB, tok string) (context.Context, error) {
	u, err := db.UserByTokenHash(ctx, HashToken(tok))
	if err != nil {
		if errs.CodeOf(err) == errs.CodeNotFound {
			return ctx, store.ErrInvalidToken
		}
		return ctx, err
	}
	return context.WithValue(WithUser(ctx, u), tokenKey{}, tok), nil
}

// ErrNoToken is returned by operations that need the request's token (logout)
// when there is none.
var ErrNoToken = errors.New("no bearer token")
