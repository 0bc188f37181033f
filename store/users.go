package store

import (
	"context"
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// userColumns is the column list scanned by scanUser.
const userColumns = `u.id, u.email, u.name, u.password_hash, u.created_at`

// scanUser scans the columns of userColumns.
func scanUser(row pgx.Row) (*User, error) {
	var u User
	if err := row.Scan(&u.ID, &u.Email, &u.Name, &u.PasswordHash, &u.CreatedAt); err != nil {
		return nil, err
	}
	return &u, nil
}

// UserByTokenHash returns the user owning the token with this SHA-256, or
// ErrNotFound-coded error if the token is unknown, expired or revoked.
func (db *DB) UserByTokenHash(ctx context.Context, hash []byte) (*User, error) {
	u, err := scanUser(db.q(ctx).QueryRow(ctx, `SELECT `+userColumns+` FROM tokens t
		JOIN users u ON u.id = t.user_id
		WHERE t.token_hash = $1 AND t.revoked_at IS NULL AND t.expires_at > now()`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("token")
	}
	if err != nil {
		return nil, fmt.Errorf("user by token: %w", err)
	}
	return u, nil
}

// MaxNameLength is the longest name (of a user, workspace or project) accepted.
const MaxNameLength = 200

// MaxDescriptionLength is the longest project description accepted.
const MaxDescriptionLength = 10000

// maxEmailLength is the longest e-mail address accepted (RFC 5321 path limit).
const maxEmailLength = 254

// NormalizeEmail trims s and lower-cases it. It returns a BAD_USER_INPUT error if
// the result is not a plain e-mail address (local@domain, no display name).
func NormalizeEmail(s string) (string, error) {
	e := strings.ToLower(strings.TrimSpace(s))
	if e == "" || len(e) > maxEmailLength {
		return "", Errorf(CodeBadUserInput, "email: not a valid e-mail address")
	}
	addr, err := mail.ParseAddress(e)
	if err != nil || addr.Address != e || addr.Name != "" {
		return "", Errorf(CodeBadUserInput, "email: not a valid e-mail address")
	}
	local, domain, ok := strings.Cut(e, "@")
	if !ok || local == "" || domain == "" || strings.ContainsAny(domain, " \t\r\n") {
		return "", Errorf(CodeBadUserInput, "email: not a valid e-mail address")
	}
	return e, nil
}

// cleanName trims a name and returns a BAD_USER_INPUT error naming field if it is
// empty or longer than max characters.
func cleanName(field, s string, max int) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", Errorf(CodeBadUserInput, "%s must not be empty", field)
	}
	if utf8.RuneCountInString(s) > max {
		return "", Errorf(CodeBadUserInput, "%s must be at most %d characters", field, max)
	}
	return s, nil
}

// validIDs returns the well-formed ids of ids; the others cannot exist.
func validIDs(ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if validID(id) {
			out = append(out, id)
		}
	}
	return out
}

// UsersByIDs returns the users with these ids, by id; unknown or malformed ids
// are absent from the map.
func (db *DB) UsersByIDs(ctx context.Context, ids []string) (map[string]*User, error) {
	out := make(map[string]*User, len(ids))
	valid := validIDs(ids)
	if len(valid) == 0 {
		return out, nil
	}
	rows, err := db.q(ctx).Query(ctx, `SELECT `+userColumns+` FROM users u WHERE u.id = ANY($1::uuid[])`, valid)
	if err != nil {
		return nil, fmt.Errorf("users by ids: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		u, err := scanUser(rows)
		if err != nil {
			return nil, fmt.Errorf("users by ids: %w", err)
		}
		out[u.ID] = u
	}
	return out, rows.Err()
}

// UserByEmail returns the user with this e-mail (normalised first), or a
// NOT_FOUND error if there is none (a malformed address included).
func (db *DB) UserByEmail(ctx context.Context, email string) (*User, error) {
	e, err := NormalizeEmail(email)
	if err != nil {
		return nil, notFound("user")
	}
	u, err := scanUser(db.q(ctx).QueryRow(ctx, `SELECT `+userColumns+` FROM users u WHERE u.email = lower($1)`, e))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("user")
	}
	if err != nil {
		return nil, fmt.Errorf("user by e-mail: %w", err)
	}
	return u, nil
}
