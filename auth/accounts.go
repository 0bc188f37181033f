package auth

import (
	"context"
	"sync"

	"taskflow/errs"
	"taskflow/store"
)

// Accounts signs users up, in and out. Passwords are hashed with argon2id
// through a Hasher, under its bound; the store keeps the SQL and writes the
// audit events in the same transaction.
type Accounts struct {
	DB *store.DB
	// Hasher makes and verifies the password hashes; nil means DefaultHasher.
	Hasher *Hasher
}

// DefaultHasher returns the Hasher of the process with the default options
// (DefaultPasswordParams, DefaultMaxConcurrent, DefaultHashWait, no metrics),
// shared by every Accounts that has none of its own.
var DefaultHasher = sync.OnceValue(func() *Hasher { return NewHasher(HasherOptions{}) })

// hasher returns the Hasher of a.
func (a Accounts) hasher() *Hasher {
	if a.Hasher == nil {
		return DefaultHasher()
	}
	return a.Hasher
}

// Register creates an account (e-mail trimmed and lower-cased) and signs it in
// with a new token. It returns BAD_USER_INPUT for a malformed e-mail (one that
// store.NewEmail refuses: invisible characters included), a name that
// store.CleanUserName refuses (empty, over store.MaxNameLength characters,
// invisible or formatting characters; checked before the password) or a
// password that CheckNewPassword refuses (extensions.rule names the rule),
// CONFLICT if the e-mail is taken, and RATE_LIMITED (ErrHashingBusy)
// when the password could not be hashed in time.
func (a Accounts) Register(ctx context.Context, email, password, name string) (*store.AuthPayload, error) {
	email, err := store.NewEmail(email)
	if err != nil {
		return nil, err
	}
	// The name before the password: the rules' work grows with the name's
	// length, and a refused name must not cost a hash.
	if name, err = store.CleanUserName(name); err != nil {
		return nil, err
	}
	password, err = CheckNewPassword(password, email, name)
	if err != nil {
		return nil, err
	}
	hash, err := a.hasher().Hash(ctx, password)
	if err != nil {
		return nil, err
	}
	token := NewToken()
	u, err := a.DB.CreateUser(ctx, email, name, hash, HashToken(token))
	if err != nil {
		return nil, err
	}
	return &store.AuthPayload{Token: token, User: u}, nil
}

// loginCandidates returns the forms a login's password is verified as, in
// order: its NFKC form (how passwords are hashed since they are normalised),
// then the password as typed when that differs (hashes made before). A
// password too long to have ever been registered is verified as typed only,
// and fails after the work of a wrong password.
func loginCandidates(password string) []string {
	if len(password) > maxPasswordBytes {
		return []string{password}
	}
	if n := NormalizePassword(password); n != password {
		return []string{n, password}
	}
	return []string{password}
}

// Login signs a user in with a new token and records user.logged_in. A
// password hash made with other parameters than the hasher's, or from a
// password that was not normalised, is replaced (when the hasher has room for
// it in time; else at a later sign-in). An unknown e-mail and a wrong password
// both return store.ErrBadCredentials after the same work (one argon2id
// verification per form of the password, see loginCandidates, and one
// user.login_failed event, written in a transaction of its own so that it
// outlives the failed mutation). It returns RATE_LIMITED (ErrHashingBusy), and
// records nothing, when the password could not be verified in time. Login
// applies no password rule: existing passwords keep working.
func (a Accounts) Login(ctx context.Context, email, password string) (*store.AuthPayload, error) {
	h := a.hasher()
	u, err := a.DB.UserByEmail(ctx, email)
	if err != nil && errs.CodeOf(err) != errs.CodeNotFound {
		return nil, err
	}
	hash, reason := h.dummy, "unknown e-mail"
	if u != nil {
		hash, reason = u.PasswordHash, "wrong password"
	}
	matched := ""
	for _, c := range loginCandidates(password) {
		ok, err := h.Verify(ctx, c, hash)
		if errs.CodeOf(err) == errs.CodeRateLimited {
			return nil, err
		}
		if err != nil {
			// A stored hash we cannot read: spend the same time, then refuse.
			if _, err := h.Verify(ctx, c, h.dummy); err != nil {
				return nil, err
			}
			continue
		}
		if ok {
			matched = c
			break
		}
	}
	if u == nil || matched == "" {
		if err := a.DB.RecordLoginFailure(ctx, u, reason); err != nil {
			return nil, err
		}
		return nil, store.ErrBadCredentials
	}
	rehash := ""
	if normalized := NormalizePassword(matched); matched != normalized || NeedsRehash(u.PasswordHash, h.params) {
		rehash, _ = h.Hash(ctx, normalized) // busy: the old hash stays until a later sign-in
	}
	token := NewToken()
	if err := a.DB.CreateSession(ctx, u, HashToken(token), rehash); err != nil {
		return nil, err
	}
	return &store.AuthPayload{Token: token, User: u}, nil
}

// Logout revokes the token of the request and records user.logged_out. It
// returns UNAUTHENTICATED when the request is anonymous.
func (a Accounts) Logout(ctx context.Context) error {
	u := UserFrom(ctx)
	tok := TokenFrom(ctx)
	if u == nil || tok == "" {
		return errs.ErrUnauthenticated
	}
	return a.DB.RevokeToken(ctx, u, HashToken(tok))
}
