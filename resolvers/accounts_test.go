package resolvers_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"taskflow/auth"
	"taskflow/httpapi/apitest"
)

const registerMutation = `mutation($e: String!, $p: String!, $n: String!) {
	register(input: {email: $e, password: $p, name: $n}) { token user { id email name } } }`

const loginMutation = `mutation($e: String!, $p: String!) { login(email: $e, password: $p) { token user { id email } } }`

var emailSeq atomic.Int64

// uniqueEmail returns a fresh address in mixed case.
func uniqueEmail(prefix string) string {
	return fmt.Sprintf("%s-%d@Example.COM", prefix, emailSeq.Add(1))
}

type authPayload struct {
	Token string
	User  struct{ ID, Email, Name string }
}

func register(t *testing.T, env *apitest.Env, email, password, name string) authPayload {
	t.Helper()
	var d struct{ Register authPayload }
	mustData(t, post(t, env, "", registerMutation, map[string]any{"e": email, "p": password, "n": name}), &d)
	return d.Register
}

func TestRegisterNormalisesEmailStoresOnlyHashes(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	ctx := context.Background()
	raw := "  " + uniqueEmail("Alice") + "\t"
	p := register(t, env, raw, "correct horse", "Alice")
	want := strings.ToLower(strings.TrimSpace(raw))
	if p.User.Email != want {
		t.Fatalf("email = %q, want %q", p.User.Email, want)
	}
	if p.Token == "" || p.User.ID == "" || p.User.Name != "Alice" {
		t.Fatalf("payload %+v", p)
	}
	// The token works.
	var me struct{ Me struct{ ID, Email string } }
	mustData(t, post(t, env, p.Token, `{ me { id email } }`, nil), &me)
	if me.Me.ID != p.User.ID {
		t.Fatalf("me = %+v, want %s", me.Me, p.User.ID)
	}
	// Only the SHA-256 of the token is stored, with an expiry about 30 days out.
	var hash []byte
	var days float64
	if err := env.DB.Pool.QueryRow(ctx, `SELECT token_hash, extract(epoch FROM expires_at - now()) / 86400 FROM tokens WHERE user_id = $1`,
		p.User.ID).Scan(&hash, &days); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(hash, auth.HashToken(p.Token)) {
		t.Fatal("stored token hash is not the SHA-256 of the token")
	}
	if days < 29 || days > 31 {
		t.Fatalf("token expires in %.1f days, want 30", days)
	}
	var n int
	if err := env.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM tokens WHERE token_hash = $1`, []byte(p.Token)).Scan(&n); err != nil || n != 0 {
		t.Fatalf("plaintext token stored (n=%d, err=%v)", n, err)
	}
	// The password is stored as an argon2id PHC hash.
	var ph string
	if err := env.DB.Pool.QueryRow(ctx, `SELECT password_hash FROM users WHERE id = $1`, p.User.ID).Scan(&ph); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ph, "$argon2id$v=19$") || strings.Contains(ph, "correct horse") {
		t.Fatalf("password_hash = %q", ph)
	}
	// user.registered, without secrets.
	var meta, chain string
	var actor *string
	if err := env.DB.Pool.QueryRow(ctx, `SELECT metadata::text, actor_id::text, chain_key FROM audit_events
		WHERE action = 'user.registered' AND entity_id = $1 AND workspace_id IS NULL`, p.User.ID).Scan(&meta, &actor, &chain); err != nil {
		t.Fatal(err)
	}
	if actor == nil || *actor != p.User.ID {
		t.Fatalf("actor = %v", actor)
	}
	for _, secret := range []string{"correct horse", "argon2", p.Token, "password"} {
		if strings.Contains(meta, secret) {
			t.Fatalf("user.registered metadata %s contains %q", meta, secret)
		}
	}
	if !strings.Contains(meta, want) {
		t.Fatalf("user.registered metadata %s lacks the e-mail", meta)
	}
}

func TestRegisterValidationAndConflict(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	email := uniqueEmail("bob")
	register(t, env, email, "correct horse", "Bob")
	cases := []struct {
		name, email, password, user, code string
	}{
		{"bad e-mail", "not-an-email", "correct horse", "X", "BAD_USER_INPUT"},
		{"e-mail with display name", "Bob <bob@example.com>", "correct horse", "X", "BAD_USER_INPUT"},
		{"empty e-mail", "   ", "correct horse", "X", "BAD_USER_INPUT"},
		{"short password", uniqueEmail("c"), "1234567", "X", "BAD_USER_INPUT"},
		{"empty name", uniqueEmail("c"), "correct horse", "", "BAD_USER_INPUT"},
		{"blank name", uniqueEmail("c"), "correct horse", "   ", "BAD_USER_INPUT"},
		{"long name", uniqueEmail("c"), "correct horse", strings.Repeat("n", 201), "BAD_USER_INPUT"},
		{"taken e-mail, other case and spaces", " " + strings.ToUpper(email) + " ", "another password", "Bob 2", "CONFLICT"},
	}
	for _, c := range cases {
		r := post(t, env, "", registerMutation, map[string]any{"e": c.email, "p": c.password, "n": c.user})
		if r.Code() != c.code {
			t.Errorf("%s: code %q, want %q (%s)", c.name, r.Code(), c.code, r.Raw)
		}
	}
	var n int
	if err := env.DB.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM users) + (SELECT count(*) FROM audit_events WHERE action = 'user.registered')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("users + user.registered events = %d, want 2 (refused registrations leave nothing)", n)
	}
	// Exactly 8 characters is enough.
	register(t, env, uniqueEmail("eight"), "k3v!9qzp", "Eight")
}

func TestLoginSameErrorForUnknownEmailAndWrongPassword(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	ctx := context.Background()
	email := uniqueEmail("carol")
	p := register(t, env, email, "correct horse", "Carol")

	wrong := post(t, env, "", loginMutation, map[string]any{"e": email, "p": "wrong horse battery"})
	unknown := post(t, env, "", loginMutation, map[string]any{"e": uniqueEmail("nobody"), "p": "wrong horse battery"})
	malformed := post(t, env, "", loginMutation, map[string]any{"e": "wrong horse battery", "p": "wrong horse battery"})
	for _, r := range []*apitest.Response{wrong, unknown, malformed} {
		wantErrCode(t, r, "UNAUTHENTICATED")
		if string(r.Body.Data) != "null" {
			t.Errorf("data = %s, want null", r.Body.Data)
		}
	}
	if wrong.Body.Errors[0]["message"] != unknown.Body.Errors[0]["message"] || wrong.Status != unknown.Status {
		t.Fatalf("wrong password %s and unknown e-mail %s differ", wrong.Raw, unknown.Raw)
	}
	// Failures are recorded (in their own transaction) without the password.
	rows, err := env.DB.Pool.Query(ctx, `SELECT entity_id, actor_id::text, metadata::text FROM audit_events
		WHERE action = 'user.login_failed' ORDER BY occurred_at`)
	if err != nil {
		t.Fatal(err)
	}
	type ev struct {
		entity string
		actor  *string
		meta   string
	}
	var evs []ev
	for rows.Next() {
		var e ev
		if err := rows.Scan(&e.entity, &e.actor, &e.meta); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
	}
	if len(evs) != 3 {
		t.Fatalf("%d user.login_failed events, want 3", len(evs))
	}
	if evs[0].entity != p.User.ID || evs[0].actor == nil || *evs[0].actor != p.User.ID {
		t.Errorf("failure for a known e-mail: entity %q actor %v, want the user", evs[0].entity, evs[0].actor)
	}
	for _, e := range evs[1:] {
		if e.entity != "" || e.actor != nil {
			t.Errorf("failure for an unknown e-mail: entity %q actor %v, want none", e.entity, e.actor)
		}
	}
	for _, e := range evs {
		if strings.Contains(e.meta, "horse") {
			t.Errorf("login_failed metadata %s contains the password", e.meta)
		}
	}

	// The right password, with the e-mail in another case, signs in.
	var d struct{ Login authPayload }
	mustData(t, post(t, env, "", loginMutation, map[string]any{"e": strings.ToUpper(email), "p": "correct horse"}), &d)
	if d.Login.User.ID != p.User.ID || d.Login.Token == "" || d.Login.Token == p.Token {
		t.Fatalf("login payload %+v", d.Login)
	}
	if got := countEvents(t, env, "", "user.logged_in", p.User.ID); got != 1 {
		t.Fatalf("%d user.logged_in events, want 1", got)
	}
	var me struct{ Me struct{ ID string } }
	mustData(t, post(t, env, d.Login.Token, `{ me { id } }`, nil), &me)
	if me.Me.ID != p.User.ID {
		t.Fatalf("me with the login token = %q", me.Me.ID)
	}
}

func TestLoginUserWithUnreadableHashIsRefused(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	u := env.NewUser(t, "Dave") // password_hash 'x'
	wantErrCode(t, post(t, env, "", loginMutation, map[string]any{"e": u.Email, "p": "x"}), "UNAUTHENTICATED")
	wantErrCode(t, post(t, env, "", loginMutation, map[string]any{"e": u.Email, "p": "anything long"}), "UNAUTHENTICATED")
}

func TestLogoutRevokesOnlyThisToken(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	email := uniqueEmail("erin")
	p := register(t, env, email, "correct horse", "Erin")
	var d struct{ Login authPayload }
	mustData(t, post(t, env, "", loginMutation, map[string]any{"e": email, "p": "correct horse"}), &d)

	var out struct{ Logout bool }
	mustData(t, post(t, env, p.Token, `mutation { logout }`, nil), &out)
	if !out.Logout {
		t.Fatal("logout = false")
	}
	r := post(t, env, p.Token, `{ me { id } }`, nil)
	if r.Status != 401 {
		t.Fatalf("revoked token: HTTP %d, want 401", r.Status)
	}
	wantErrCode(t, r, "UNAUTHENTICATED")
	// The other session still works.
	var me struct{ Me struct{ ID string } }
	mustData(t, post(t, env, d.Login.Token, `{ me { id } }`, nil), &me)
	if me.Me.ID != p.User.ID {
		t.Fatal("the other token stopped working")
	}
	// Anonymous logout.
	wantErrCode(t, post(t, env, "", `mutation { logout }`, nil), "UNAUTHENTICATED")
	// One user.logged_out, about and by the user, with nothing of the token.
	var meta string
	var actor *string
	if err := env.DB.Pool.QueryRow(context.Background(), `SELECT metadata::text, actor_id::text FROM audit_events
		WHERE action = 'user.logged_out' AND entity_id = $1 AND workspace_id IS NULL`, p.User.ID).Scan(&meta, &actor); err != nil {
		t.Fatal(err)
	}
	if meta != "{}" || actor == nil || *actor != p.User.ID || countEvents(t, env, "", "user.logged_out", p.User.ID) != 1 {
		t.Fatalf("user.logged_out: metadata %s, actor %v", meta, actor)
	}
}

// register refuses a weak password with BAD_USER_INPUT naming the rule, in a
// message without the password, and creates nothing.
func TestRegisterRefusesWeakPasswords(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	email := strings.ToLower(uniqueEmail("grace.hopper"))
	for password, rule := range map[string]string{
		"short":      "TOO_SHORT",
		email:        "PERSONAL",
		"Hopper1906": "PERSONAL",
		"        ":   "REPETITIVE",
		"12345678":   "REPETITIVE",
		"password":   "COMMON",
		"ｉｌｏｖｅｙｏｕ":   "COMMON",
	} {
		r := post(t, env, "", registerMutation, map[string]any{"e": email, "p": password, "n": "Grace Hopper"})
		ext, _ := r.Body.Errors[0]["extensions"].(map[string]any)
		msg, _ := r.Body.Errors[0]["message"].(string)
		if r.Code() != "BAD_USER_INPUT" || ext["rule"] != rule || ext["field"] != "password" || string(r.Body.Data) != "null" {
			t.Errorf("%q: %s, want rule %s", password, r.Raw, rule)
		}
		if strings.Contains(msg, email) || strings.TrimSpace(password) != "" && strings.Contains(msg, password) && password != "password" {
			t.Errorf("%q: message %q echoes the input", password, msg)
		}
	}
	var n int
	if err := env.DB.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM users) + (SELECT count(*) FROM audit_events)`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("refused registrations left %d rows (%v)", n, err)
	}
}

// Passwords are NFKC-normalised before they are hashed, so the same password
// typed in full-width or half-width letters signs in; a hash made before
// normalisation from a password that changes under it still signs in, and is
// replaced by the hash of the normalised password; an existing password that
// the rules of new passwords would refuse still signs in.
func TestLoginNormalisesPasswords(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	ctx := context.Background()
	const wide, narrow = "ｃｏｒｒｅｃｔ ｈｏｒｓｅ", "correct horse"
	email := uniqueEmail("hal")
	register(t, env, email, wide, "Hal")
	for _, p := range []string{narrow, wide} {
		mustData(t, post(t, env, "", loginMutation, map[string]any{"e": email, "p": p}), nil)
	}

	// Accounts from before normalisation, inserted with their hash as it was made.
	insert := func(name, hash string) (email, id string) {
		email = strings.ToLower(uniqueEmail(name))
		if err := env.DB.Pool.QueryRow(ctx, `INSERT INTO users (email, name, password_hash) VALUES ($1, $2, $3) RETURNING id`,
			email, name, hash).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return email, id
	}
	oldEmail, oldID := insert("ida", auth.HashPassword(wide, auth.FastPasswordParams))
	wantErrCode(t, post(t, env, "", loginMutation, map[string]any{"e": oldEmail, "p": narrow}), "UNAUTHENTICATED")
	mustData(t, post(t, env, "", loginMutation, map[string]any{"e": oldEmail, "p": wide}), nil)
	var now, meta string
	if err := env.DB.Pool.QueryRow(ctx, `SELECT password_hash FROM users WHERE id = $1`, oldID).Scan(&now); err != nil {
		t.Fatal(err)
	}
	if ok, err := auth.VerifyPassword(narrow, now); !ok || err != nil {
		t.Fatalf("the hash was not replaced by the normalised password's: %v %v", ok, err)
	}
	if err := env.DB.Pool.QueryRow(ctx, `SELECT metadata::text FROM audit_events WHERE action = 'user.logged_in' AND entity_id = $1`,
		oldID).Scan(&meta); err != nil || meta != `{"passwordRehashed": true}` {
		t.Fatalf("user.logged_in metadata %s (%v)", meta, err)
	}
	for _, p := range []string{narrow, wide} {
		mustData(t, post(t, env, "", loginMutation, map[string]any{"e": oldEmail, "p": p}), nil)
	}

	weakEmail, weakID := insert("jay", auth.HashPassword("password", auth.FastPasswordParams))
	mustData(t, post(t, env, "", loginMutation, map[string]any{"e": weakEmail, "p": "password"}), nil)
	if got := countEvents(t, env, "", "user.logged_in", weakID); got != 1 {
		t.Fatalf("%d user.logged_in events for an existing weak password", got)
	}
}

func TestMeAnonymousIsNull(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	r := post(t, env, "", `{ me { id } }`, nil)
	mustData(t, r, nil)
	if string(r.Body.Data) != `{"me":null}` {
		t.Fatalf("data = %s", r.Body.Data)
	}
}

func TestLoginPayloadReadsAsTheSignedInUser(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	email := uniqueEmail("fay")
	p := register(t, env, email, "correct horse", "Fay")
	owner := apitest.User{ID: p.User.ID, Email: email, Token: p.Token}
	ws := mkWorkspace(t, env, owner)
	var d struct {
		Login struct {
			User struct {
				Workspaces []struct {
					ID, ViewerRole string
					Members        []struct{ User struct{ ID string } }
				}
			}
		}
	}
	mustData(t, post(t, env, "", `mutation($e: String!, $p: String!) { login(email: $e, password: $p) {
		user { workspaces { id viewerRole members { user { id } } } } } }`, map[string]any{"e": email, "p": "correct horse"}), &d)
	w := d.Login.User.Workspaces
	if len(w) != 1 || w[0].ID != ws || w[0].ViewerRole != "OWNER" || len(w[0].Members) != 1 || w[0].Members[0].User.ID != p.User.ID {
		t.Fatalf("login payload workspaces = %+v", w)
	}
}

func TestLoginRehashesOutdatedPasswordHash(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	ctx := context.Background()
	email := strings.ToLower(uniqueEmail("gus"))
	old := auth.HashPassword("correct horse", auth.PasswordParams{Memory: 128, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32})
	var id string
	if err := env.DB.Pool.QueryRow(ctx, `INSERT INTO users (email, name, password_hash) VALUES ($1, 'Gus', $2) RETURNING id`, email, old).Scan(&id); err != nil {
		t.Fatal(err)
	}
	mustData(t, post(t, env, "", loginMutation, map[string]any{"e": email, "p": "correct horse"}), nil)
	var now string
	if err := env.DB.Pool.QueryRow(ctx, `SELECT password_hash FROM users WHERE id = $1`, id).Scan(&now); err != nil {
		t.Fatal(err)
	}
	if now == old || auth.NeedsRehash(now, auth.FastPasswordParams) {
		t.Fatalf("hash not upgraded: %q", now)
	}
	if ok, err := auth.VerifyPassword("correct horse", now); err != nil || !ok {
		t.Fatal("the new hash does not verify")
	}
	// And the password still signs in.
	mustData(t, post(t, env, "", loginMutation, map[string]any{"e": email, "p": "correct horse"}), nil)
}
