package bench

import (
	"context"
	"testing"

	"taskflow/auth"
	"taskflow/errs"
	"taskflow/store/storetest"
)

// benchLogin signs in with a wrong password, as an existing or an unknown
// e-mail, with the production argon2id parameters: the two must cost the same
// (go test ./bench -run '^$' -bench Login -benchtime 20x).
func benchLogin(b *testing.B, known bool) {
	db := storetest.DB(b)
	ctx := context.Background()
	accounts := auth.Accounts{DB: db}
	if _, err := accounts.Register(ctx, "known@example.com", "correct horse", "Known"); err != nil {
		b.Fatal(err)
	}
	email := "unknown@example.com"
	if known {
		email = "known@example.com"
	}
	for b.Loop() {
		if _, err := accounts.Login(ctx, email, "wrong horse"); errs.CodeOf(err) != errs.CodeUnauthenticated {
			b.Fatalf("login: %v", err)
		}
	}
}

// BenchmarkLoginWrongPassword is a failed login of an existing account.
func BenchmarkLoginWrongPassword(b *testing.B) { benchLogin(b, true) }

// BenchmarkLoginUnknownEmail is a failed login of an e-mail with no account.
func BenchmarkLoginUnknownEmail(b *testing.B) { benchLogin(b, false) }
