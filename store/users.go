package store

import (
	"context"
	"errors"
	"fmt"

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
