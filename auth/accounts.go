package auth

import (
	"context"
	"sync"
	"unicode/utf8"

	"taskflow/errs"
	"taskflow/store"
)

// Accounts signs users up, in and out. Passwords are hashed with argon2id here;
// the store keeps the SQL and writes the audit events in the same transaction.
type Accounts struct {
	DB *store.DB
	// Params are the argon2id parameters of new hashes; zero means
	// DefaultPasswordParams.
	Params PasswordParams
}

// params returns the parameters of new hashes.
func (a Accounts) params() PasswordParams {
	if a.Params == (PasswordParams{}) {
		return DefaultPasswordParams
	}
	return a.Params
}

var (
	dummyMu     sync.Mutex
	dummyHashes = map[PasswordParams]string{}
)

// dummyHash returns a hash made with p, verified against when a login's e-mail
// matches no account, so that an unknown e-mail costs as much time as a wrong
// password.
func dummyHash(p PasswordParams) string {
	dummyMu.Lock()
	defer dummyMu.Unlock()
	h, ok := dummyHashes[p]
	if !ok {
		h = HashPassword("taskflow dummy password", p)
		dummyHashes[p] = h
	}
	return h
}

// checkPassword returns a BAD_USER_INPUT error for a password that is too short or
// too long.
func checkPassword(password string) error {
	n := utf8.RuneCountInString(password)
	if n < MinPasswordLength {
		return errs.Errorf(errs.CodeBadUserInput, "password must be at least %d characters", MinPasswordLength)
	}
	if n > MaxPasswordLength {
		return errs.Errorf(errs.CodeBadUserInput, "password must be at most %d characters", MaxPasswordLength)
	}
	return nil
}

// Register creates an account (e-mail trimmed and lower-cased) and signs it in
// with a new token. It returns BAD_USER_INPUT for a malformed e-mail, a password
// shorter than 8 characters or an empty name, and CONFLICT if the e-mail is taken.
func (a Accounts) Register(ctx context.Context, email, password, name string) (*store.AuthPayload, error) {
	email, err := store.NormalizeEmail(email)
	if err != nil {
		return nil, err
	}
	if err := checkPassword(password); err != nil {
		return nil, err
	}
	token := NewToken()
	u, err := a.DB.CreateUser(ctx, email, name, HashPassword(password, a.params()), HashToken(token))
	if err != nil {
		return nil, err
	}
	return &store.AuthPayload{Token: token, User: u}, nil
}

// Login signs a user in with a new token and records user.logged_in; a password
// hash made with other parameters than the current ones is replaced. An unknown
// e-mail and a wrong password both return store.ErrBadCredentials after the same
// work (one argon2id verification and one user.login_failed event, written in a
// transaction of its own so that it outlives the failed mutation).
func (a Accounts) Login(ctx context.Context, email, password string) (*store.AuthPayload, error) {
	u, err := a.DB.UserByEmail(ctx, email)
	if err != nil && errs.CodeOf(err) != errs.CodeNotFound {
		return nil, err
	}
	hash, reason := dummyHash(a.params()), "unknown e-mail"
	if u != nil {
		hash, reason = u.PasswordHash, "wrong password"
	}
	ok, verr := VerifyPassword(password, hash)
	if verr != nil {
		// A stored hash we cannot read: spend the same time, then refuse.
		_, _ = VerifyPassword(password, dummyHash(a.params()))
		ok = false
	}
	if u == nil || !ok {
		if err := a.DB.RecordLoginFailure(ctx, u, reason); err != nil {
			return nil, err
		}
		return nil, store.ErrBadCredentials
	}
	rehash := ""
	if NeedsRehash(u.PasswordHash, a.params()) {
		rehash = HashPassword(password, a.params())
	}
	token := NewToken()
	if err := a.DB.CreateSession(ctx, u, HashToken(token), rehash); err != nil {
		return nil, err
	}
	return &store.AuthPayload{Token: token, User: u}, nil
}

// Logout revokes the token of the request. It returns UNAUTHENTICATED when the
// request is anonymous.
func (a Accounts) Logout(ctx context.Context) error {
	u := UserFrom(ctx)
	tok := TokenFrom(ctx)
	if u == nil || tok == "" {
		return errs.ErrUnauthenticated
	}
	return a.DB.RevokeToken(ctx, u, HashToken(tok))
}
