package auth

import (
	"strings"
	"testing"
)

func TestHashPasswordRoundTrip(t *testing.T) {
	t.Parallel()
	h := HashPassword("correct horse", DefaultPasswordParams)
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("hash %q is not a PHC argon2id string with the default parameters", h)
	}
	if strings.Contains(h, "correct horse") {
		t.Fatal("hash contains the password")
	}
	ok, err := VerifyPassword("correct horse", h)
	if err != nil || !ok {
		t.Fatalf("right password: ok=%v err=%v", ok, err)
	}
	ok, err = VerifyPassword("correct horsf", h)
	if err != nil || ok {
		t.Fatalf("wrong password: ok=%v err=%v", ok, err)
	}
	if h2 := HashPassword("correct horse", DefaultPasswordParams); h2 == h {
		t.Fatal("two hashes of one password are equal: the salt is not random")
	}
}

func TestVerifyPasswordUsesStoredParams(t *testing.T) {
	t.Parallel()
	h := HashPassword("pw-pw-pw-pw", PasswordParams{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32})
	if !strings.Contains(h, "$m=64,t=1,p=1$") {
		t.Fatalf("hash %q does not record its parameters", h)
	}
	if ok, err := VerifyPassword("pw-pw-pw-pw", h); err != nil || !ok {
		t.Fatalf("ok=%v err=%v", ok, err)
	}
}

func TestVerifyPasswordMalformed(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"", "x", "$argon2i$v=19$m=64,t=1,p=1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5",
		"$argon2id$v=18$m=64,t=1,p=1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5",
		"$argon2id$v=19$m=99999999,t=1,p=1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5",
		"$argon2id$v=19$m=64,t=1,p=1$!!$a2V5a2V5a2V5a2V5a2V5"} {
		if ok, err := VerifyPassword("whatever", h); err == nil || ok {
			t.Errorf("VerifyPassword(%q) = %v, %v; want an error", h, ok, err)
		}
	}
}

func BenchmarkVerifyPassword(b *testing.B) {
	h := HashPassword("correct horse", DefaultPasswordParams)
	for b.Loop() {
		_, _ = VerifyPassword("correct horse", h)
	}
}
