package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/argon2"
)

// PasswordParams are the argon2id cost parameters of new password hashes.
type PasswordParams struct {
	Memory  uint32 // KiB
	Time    uint32 // passes
	Threads uint8
	SaltLen int
	KeyLen  uint32
}

// DefaultPasswordParams follow OWASP's argon2id recommendation (19 MiB, 2
// passes, 1 thread).
var DefaultPasswordParams = PasswordParams{Memory: 19 * 1024, Time: 2, Threads: 1, SaltLen: 16, KeyLen: 32}

// FastPasswordParams are cheap argon2id parameters for tests only (the race
// detector makes the default ones take most of a second).
var FastPasswordParams = PasswordParams{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}

// MinPasswordLength and MaxPasswordLength bound a password's length in characters.
const (
	MinPasswordLength = 8
	MaxPasswordLength = 1024
)

// errMalformedHash is returned for a stored hash that is not an argon2id PHC string.
var errMalformedHash = errors.New("auth: malformed password hash")

// HashPassword returns the argon2id hash of password with a fresh random salt, in
// the PHC string format: $argon2id$v=19$m=..,t=..,p=..$salt$key (base64, no
// padding). It is not bounded: requests hash through a Hasher.
func HashPassword(password string, p PasswordParams) string {
	salt := make([]byte, p.SaltLen)
	if _, err := rand.Read(salt); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	key := argon2.IDKey([]byte(password), salt, p.Time, p.Memory, p.Threads, p.KeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.Memory, p.Time, p.Threads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
}

// VerifyPassword reports whether password matches the PHC-encoded argon2id hash,
// recomputing it with the hash's own parameters and comparing in constant time.
// It is not bounded: requests verify through a Hasher.
func VerifyPassword(password, encoded string) (bool, error) {
	p, salt, key, err := decodeHash(encoded)
	if err != nil {
		return false, err
	}
	return verifyKey(password, p, salt, key), nil
}

// verifyKey reports whether password hashes to key with p and salt.
func verifyKey(password string, p PasswordParams, salt, key []byte) bool {
	got := argon2.IDKey([]byte(password), salt, p.Time, p.Memory, p.Threads, uint32(len(key)))
	return subtle.ConstantTimeCompare(got, key) == 1
}

// decodeHash parses a PHC argon2id string.
func decodeHash(encoded string) (p PasswordParams, salt, key []byte, err error) {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return p, nil, nil, errMalformedHash
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return p, nil, nil, errMalformedHash
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.Memory, &p.Time, &p.Threads); err != nil {
		return p, nil, nil, errMalformedHash
	}
	// Refuse parameters that would make verification absurdly expensive or trivial.
	if p.Memory < 8 || p.Memory > 1<<21 || p.Time < 1 || p.Time > 16 || p.Threads < 1 {
		return p, nil, nil, errMalformedHash
	}
	if salt, err = base64.RawStdEncoding.DecodeString(parts[4]); err != nil || len(salt) < 8 {
		return p, nil, nil, errMalformedHash
	}
	if key, err = base64.RawStdEncoding.DecodeString(parts[5]); err != nil || len(key) < 16 {
		return p, nil, nil, errMalformedHash
	}
	p.SaltLen, p.KeyLen = len(salt), uint32(len(key))
	return p, salt, key, nil
}

// NeedsRehash reports whether an encoded hash was made with parameters other than
// p (or cannot be read), so that it should be replaced at the next sign-in.
func NeedsRehash(encoded string, p PasswordParams) bool {
	got, _, _, err := decodeHash(encoded)
	return err != nil || got != p
}
