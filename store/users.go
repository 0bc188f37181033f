package store

import (
	"context"
	"errors"
	"fmt"
	"net/mail"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"taskflow/audit"
	"taskflow/errs"
)

// userColumns is the column list scanned by scanUser.
const userColumns = `u.id, u.email, u.name, u.password_hash, u.created_at`

// userDests returns the destinations of the columns of userColumns in u,
// then extra.
func userDests(u *User, extra ...any) []any {
	return append([]any{&u.ID, &u.Email, &u.Name, &u.PasswordHash, &u.CreatedAt}, extra...)
}

// scanUser scans the columns of userColumns.
func scanUser(row pgx.Row) (*User, error) {
	var u User
	if err := row.Scan(userDests(&u)...); err != nil {
		return nil, err
	}
	return &u, nil
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
		return "", errs.Errorf(errs.CodeBadUserInput, "email: not a valid e-mail address")
	}
	addr, err := mail.ParseAddress(e)
	if err != nil || addr.Address != e || addr.Name != "" {
		return "", errs.Errorf(errs.CodeBadUserInput, "email: not a valid e-mail address")
	}
	local, domain, ok := strings.Cut(e, "@")
	if !ok || local == "" || domain == "" || strings.ContainsAny(domain, " \t\r\n") {
		return "", errs.Errorf(errs.CodeBadUserInput, "email: not a valid e-mail address")
	}
	return e, nil
}

// NewEmail is NormalizeEmail for an address that is to be stored anew (an
// account's, an invitation's): it also returns a BAD_USER_INPUT error for an
// address holding any character hiddenRune finds (one that shows as nothing
// or moves the text around it, or a space of any kind), with which an address
// looks like another one. Addresses stored before are still found by
// NormalizeEmail (sign-in).
func NewEmail(s string) (string, error) {
	e, err := NormalizeEmail(s)
	if err != nil {
		return "", err
	}
	if _, hidden := hiddenRune(e, nil); hidden {
		return "", errs.Errorf(errs.CodeBadUserInput,
			"email: not a valid e-mail address (it holds an invisible, formatting or space character)")
	}
	return e, nil
}

// CleanUserName returns a user's name as it is stored (trimmed), or the
// BAD_USER_INPUT error of one that is empty, longer than MaxNameLength
// characters or holds a character a name may not (cleanName): what CreateUser
// checks, for a caller to check before the work that comes first (register
// hashes the password).
func CleanUserName(name string) (string, error) { return cleanName("name", name, MaxNameLength) }

// cleanName returns a new name (a user's, a workspace's, a project's) as it is
// stored, trimmed, or a BAD_USER_INPUT error naming field if it is empty,
// longer than max characters (trimName) or holds a character hiddenRune finds
// that keptInName does not keep (hiddenInName).
func cleanName(field, s string, max int) (string, error) {
	s, err := trimName(field, s, max)
	if err != nil {
		return "", err
	}
	if err := hiddenInName(field, s); err != nil {
		return "", err
	}
	return s, nil
}

// trimName trims a name and returns a BAD_USER_INPUT error naming field if it
// is empty or longer than max characters.
func trimName(field, s string, max int) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", errs.Errorf(errs.CodeBadUserInput, "%s must not be empty", field)
	}
	if utf8.RuneCountInString(s) > max {
		return "", errs.Errorf(errs.CodeBadUserInput, "%s must be at most %d characters", field, max)
	}
	return s, nil
}

// hiddenInName returns a BAD_USER_INPUT error naming field and the code point
// of the first character of the name s that hiddenRune finds and keptInName
// does not keep, or nil. Such a name shows as another ("admin\u200b" as
// "admin"), reversed ("Alice\u202Egnp.exe" as "Aliceexe.png"), or recolours
// the terminal an audit export is printed in ("\x1b[31m"). It is for new
// names only: names stored before the rule are read as they are.
func hiddenInName(field, s string) error {
	r, hidden := hiddenRune(s, keptInName)
	switch {
	case !hidden:
		return nil
	case unicode.Is(unicode.Z, r):
		return errs.Errorf(errs.CodeBadUserInput, "%s: holds a space or line break other than the plain space U+0020 (U+%04X)", field, r)
	default:
		return errs.Errorf(errs.CodeBadUserInput, "%s: holds an invisible or formatting character (U+%04X)", field, r)
	}
}

// hiddenRune returns the first character of s that shows as nothing, as a
// blank, or changes how the text around it shows, and true; or 0 and false
// when s has none that keep (nil: none) keeps. keep is asked with the
// character and where it starts in s. Such a character is
//   - a control character (Cc: C0 and C1, ESC of an ANSI escape, tab, line
//     feed, DEL),
//   - a format character (Cf: zero-width space, non-joiner and joiner, word
//     joiner, bidirectional marks, embeddings, overrides and isolates, the
//     byte-order mark, the soft hyphen, tag characters),
//   - one Unicode tells renderers to ignore though it is no format character
//     (Other_Default_Ignorable_Code_Point: the Hangul fillers U+115F, U+1160,
//     U+3164 and U+FFA0, which show as a blank or nothing, U+034F),
//   - a separator (Z: every space, U+0020 included, and the line and
//     paragraph separators),
//   - a variation selector (unicode.Variation_Selector: U+FE00..U+FE0F,
//     U+E0100..U+E01EF, the Mongolian U+180B..U+180D and U+180F), which
//     shows as nothing unless it follows a character it has a variation of
//     (variationSelectorKept),
//   - a symbol drawn blank (blankSymbols: U+2800 BRAILLE PATTERN BLANK,
//     U+1D159 MUSICAL SYMBOL NULL NOTEHEAD), a space in all but name.
//
// It is the one rule of new e-mail addresses (NewEmail, which keeps nothing)
// and new names (cleanName, which keeps what keptInName keeps).
func hiddenRune(s string, keep func(r rune, at int, s string) bool) (rune, bool) {
	for i, r := range s {
		if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Other_Default_Ignorable_Code_Point, unicode.Z,
			unicode.Variation_Selector, blankSymbols) &&
			(keep == nil || !keep(r, i, s)) {
			return r, true
		}
	}
	return 0, false
}

// zeroWidthJoiner is U+200D, which joins emoji into one (a family, a rainbow
// flag) and letters of some scripts into other shapes.
const zeroWidthJoiner = '\u200D'

// keptInName reports whether a name may hold the character r that starts at
// at in s, which hiddenRune finds: the plain space (U+0020); the ideographic
// space (U+3000), which CJK input methods type for a space and which separates
// a Japanese family name from the given name, as wide as a character and so
// seen; a zero-width joiner between two emoji (joinsEmoji), which is how
// emoji such as a family (U+1F468 U+200D U+1F469 U+200D U+1F467) are written;
// a zero-width non-joiner or joiner inside a word of a script whose
// spelling uses them (joinsLetters): many Persian names hold a non-joiner;
// and a variation selector after a character it has a variation of
// (variationSelectorKept: an emoji's presentation, an ideograph's variant).
func keptInName(r rune, at int, s string) bool {
	if unicode.Is(unicode.Variation_Selector, r) {
		return variationSelectorKept(r, at, s)
	}
	switch r {
	case ' ', '\u3000':
		return true
	case zeroWidthJoiner:
		before, after := s[:at], s[at+utf8.RuneLen(r):]
		return joinsEmoji(before, after) || joinsLetters(before, after)
	case zeroWidthNonJoiner:
		return joinsLetters(s[:at], s[at+utf8.RuneLen(r):])
	}
	return false
}

// zeroWidthNonJoiner is U+200C, which keeps two letters of a joining script
// apart (Persian writes it inside many words and names).
const zeroWidthNonJoiner = '\u200C'

// joiningScripts are the scripts whose spelling writes the zero-width
// non-joiner and joiner inside words: the cursive scripts (Arabic, which
// Persian is written in, Syriac, N'Ko, Mongolian) and the Brahmic scripts of
// India and Sri Lanka, where they choose a conjunct's form after a virama.
// RFC 5892 (Appendix A.1 and A.2) allows them in domain names in the same
// places.
var joiningScripts = []*unicode.RangeTable{unicode.Arabic, unicode.Syriac, unicode.Nko, unicode.Mongolian,
	unicode.Devanagari, unicode.Bengali, unicode.Gurmukhi, unicode.Gujarati, unicode.Oriya, unicode.Tamil,
	unicode.Telugu, unicode.Kannada, unicode.Malayalam, unicode.Sinhala}

// joinsLetters reports whether a zero-width (non-)joiner between before and
// after sits inside a word of a joining script: the characters on both sides
// are letters or marks of one of joiningScripts, the same one. Between Latin
// letters, or at either end of a name, it only hides, and is refused.
func joinsLetters(before, after string) bool {
	prev, n := utf8.DecodeLastRuneInString(before)
	next, m := utf8.DecodeRuneInString(after)
	if n == 0 || m == 0 || !unicode.In(prev, unicode.L, unicode.M) || !unicode.In(next, unicode.L, unicode.M) {
		return false
	}
	for _, script := range joiningScripts {
		if unicode.Is(script, prev) && unicode.Is(script, next) {
			return true
		}
	}
	return false
}

// joinsEmoji reports whether a zero-width joiner between before and after
// joins two emoji: the character before it, past any emoji variation selector
// (U+FE0F) and skin tone modifier (U+1F3FB..U+1F3FF), and the character after
// it are Extended_Pictographic (extendedPictographic), as every emoji that an
// emoji ZWJ sequence joins is; another symbol (\u2103, \u2500, a braille
// pattern) beside a joiner is joined to nothing, and the joiner only hides.
func joinsEmoji(before, after string) bool {
	prev, n := utf8.DecodeLastRuneInString(before)
	for n > 0 && (prev == '\uFE0F' || prev >= 0x1F3FB && prev <= 0x1F3FF) {
		before = before[:len(before)-n]
		prev, n = utf8.DecodeLastRuneInString(before)
	}
	next, m := utf8.DecodeRuneInString(after)
	emoji := func(r rune, size int) bool { return size > 0 && unicode.Is(extendedPictographic, r) }
	return emoji(prev, n) && emoji(next, m)
}

// uuidArray returns the Postgres array literal of the well-formed ids of ids
// (the others cannot exist), each in its canonical form (uuid.Parse also takes
// "{...}" and "urn:uuid:..."), and how many there are. The loaders' queries take
// their ids as this one text parameter cast to uuid[] in SQL, which pgx sends as
// it is, where a []string costs an encode plan per element.
func uuidArray(ids []string) (literal string, n int) {
	var b strings.Builder
	b.Grow(1 + 37*len(ids))
	b.WriteByte('{')
	for _, id := range ids {
		u, err := uuid.Parse(id)
		if err != nil {
			continue
		}
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString(u.String())
		n++
	}
	b.WriteByte('}')
	return b.String(), n
}

// anyID returns the SQL condition "col is one of ids" on parameter $p, the
// parameter's value and how many well-formed ids there are (uuidArray's). One id
// is compared with = and the others with = ANY of an array: Postgres plans a
// statement with an array parameter again at every call (its generic plan
// assumes ten elements, so the one-element custom plan always looks cheaper),
// about 80-200 µs of planning on a one-key load, where a lone field's loader
// (project(id), a task's assignee) always has one key
// (docs/decisions/2026-12-01-one-key-one-plan.md).
func anyID(col string, p int, ids []string) (cond string, arg any, n int) {
	lit, n := uuidArray(ids)
	param := "$" + strconv.Itoa(p)
	if n == 1 {
		return col + " = " + param + "::uuid", lit[1 : len(lit)-1], 1
	}
	return col + " = ANY(" + param + "::text[]::uuid[])", lit, n
}

// UsersByIDs returns the users with these ids, by id; unknown or malformed ids
// are absent from the map.
func (db *DB) UsersByIDs(ctx context.Context, ids []string) (map[string]*User, error) {
	out := make(map[string]*User, len(ids))
	cond, arg, n := anyID("u.id", 1, ids)
	if n == 0 {
		return out, nil
	}
	rows, err := db.q(ctx).Query(ctx, `SELECT `+userColumns+` FROM users u WHERE `+cond, arg)
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

// TokenLifetime is how long a bearer token from register or login is valid.
const TokenLifetime = 30 * 24 * time.Hour

// insertToken stores the SHA-256 of a new token of userID, valid for
// TokenLifetime: deferred in the unit of work of ctx (db.exec).
func (db *DB) insertToken(ctx context.Context, tx Querier, userID string, tokenHash []byte) error {
	return db.exec(ctx, tx, "insert token", `INSERT INTO tokens (token_hash, user_id, expires_at)
		SELECT $1, $2, now() + $3 * interval '1 second' WHERE taskflow_ok()`,
		[]any{tokenHash, userID, int64(TokenLifetime / time.Second)}, 1)
}

// CreateUser creates an account with an already hashed password, stores the hash
// of its first token and records user.registered. It validates the e-mail
// (trimmed and lower-cased, NewEmail) and the name (cleanName). It returns
// BAD_USER_INPUT for a bad e-mail or an empty or over-long name or one holding
// a character a name may not, and CONFLICT if the e-mail is taken.
func (db *DB) CreateUser(ctx context.Context, email, name, passwordHash string, tokenHash []byte) (*User, error) {
	email, err := NewEmail(email)
	if err != nil {
		return nil, err
	}
	name, err = cleanName("name", name, MaxNameLength)
	if err != nil {
		return nil, err
	}
	u := &User{ID: newID(), Email: email, Name: name, PasswordHash: passwordHash, CreatedAt: stamp(time.Now())}
	err = db.WithTx(ctx, func(ctx context.Context, tx Querier) error {
		// One round trip with the commit: the account, its token and its event
		// (a taken e-mail is refused by the account's insert: CONFLICT).
		if err := db.exec(ctx, tx, "insert user", `INSERT INTO users (id, email, name, password_hash, created_at)
			SELECT $1, $2, $3, $4, $5 WHERE taskflow_ok()`, []any{u.ID, u.Email, u.Name, u.PasswordHash, u.CreatedAt}, 1); err != nil {
			return err
		}
		if err := db.insertToken(ctx, tx, u.ID, tokenHash); err != nil {
			return err
		}
		return db.appendAudit(ctx, tx, audit.Event{ActorID: &u.ID, Action: "user.registered",
			EntityID: u.ID, Metadata: audit.Snapshot(u)})
	})
	if err != nil {
		return nil, err
	}
	return u, nil
}

// CreateSession stores the hash of a new token for a user whose password was
// just verified and records user.logged_in. A non-empty newPasswordHash replaces
// the stored password hash (a rehash with current parameters), which the
// event notes as {"passwordRehashed": true}.
func (db *DB) CreateSession(ctx context.Context, u *User, tokenHash []byte, newPasswordHash string) error {
	return db.WithTx(ctx, func(ctx context.Context, tx Querier) error {
		if err := db.insertToken(ctx, tx, u.ID, tokenHash); err != nil {
			return err
		}
		meta := map[string]any{}
		if newPasswordHash != "" {
			if err := db.exec(ctx, tx, "rehash password", `UPDATE users SET password_hash = $2 WHERE id = $1 AND taskflow_ok()`,
				[]any{u.ID, newPasswordHash}, -1); err != nil {
				return err
			}
			meta["passwordRehashed"] = true
		}
		return db.appendAudit(ctx, tx, audit.Event{ActorID: &u.ID, Action: "user.logged_in", EntityID: u.ID,
			Metadata: meta})
	})
}

// RecordLoginFailure records user.login_failed for a user (nil when the e-mail
// matches no account) in a short transaction of its own, which commits even when
// the request's unit of work rolls back (as it does, since the login fails).
// reason says why, for the log's readers; it never holds the password.
func (db *DB) RecordLoginFailure(ctx context.Context, u *User, reason string) error {
	ev := audit.Event{Action: "user.login_failed", Metadata: map[string]any{"reason": reason}}
	if u != nil {
		ev.ActorID = &u.ID
		ev.EntityID = u.ID
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	detached := context.WithoutCancel(ctx)
	defer tx.Rollback(detached) //nolint:errcheck // a no-op after Commit
	if err := db.appendAudit(ctx, tx, ev); err != nil {
		return err
	}
	if err := tx.Commit(detached); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	db.wakeSealer()
	return nil
}

// RevokeToken revokes the token with this SHA-256 if it belongs to u and is not
// revoked yet, and records user.logged_out (no token, hash or expiry in it) in
// the same transaction; a token that was already revoked changes nothing and
// records nothing. It returns UNAUTHENTICATED for no user.
func (db *DB) RevokeToken(ctx context.Context, u *User, tokenHash []byte) error {
	if u == nil {
		return errs.ErrUnauthenticated
	}
	return db.WithTx(ctx, func(ctx context.Context, _ Querier) error {
		// One round trip with the commit: the token revoked and, when it was
		// not revoked already, user.logged_out.
		rec, err := db.recordNow(ctx, u, "user.logged_out")
		if err != nil {
			return err
		}
		event, params := recordedFrom(&rec, "r", "NULL::uuid", "r.user_id", `'{}'::jsonb`, []any{tokenHash, u.ID})
		unitOfWorkFrom(ctx).write("revoke token", `WITH r AS (UPDATE tokens SET revoked_at = now()
			WHERE token_hash = $1 AND user_id = $2 AND revoked_at IS NULL AND taskflow_ok() RETURNING user_id) `+event, params, -1)
		// This instance refuses the token from the commit on; the others
		// once their revocation feeds read the change (RunRevocationFeed).
		db.onCommit(ctx, func() { db.sessions.revoked(string(tokenHash)) })
		return nil
	})
}
