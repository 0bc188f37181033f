package auth

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"io"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"taskflow/errs"
)

// The rules of a new password (NIST SP 800-63B), named in extensions.rule of
// the BAD_USER_INPUT error that refuses one.
const (
	// RuleTooShort: fewer than MinPasswordLength characters.
	RuleTooShort = "TOO_SHORT"
	// RuleTooLong: more than MaxPasswordLength characters.
	RuleTooLong = "TOO_LONG"
	// RulePersonal: mostly the account's e-mail address or name.
	RulePersonal = "PERSONAL"
	// RuleRepetitive: one character repeated, a run such as abcdefgh or
	// 98765432, or a block of up to 4 characters repeated.
	RuleRepetitive = "REPETITIVE"
	// RuleCommon: on the embedded list of common and breached passwords.
	RuleCommon = "COMMON"
)

// maxPasswordBytes is the most bytes MaxPasswordLength characters take in
// UTF-8: a longer input is refused (or, at login, cannot match) before any
// Unicode work.
const maxPasswordBytes = 4 * MaxPasswordLength

// NormalizePassword returns password in Unicode normalisation form NFKC, the
// form in which a new password is checked, counted and hashed, so that the
// same characters typed on different keyboards or systems (composed or not,
// full-width or not) are the same password.
func NormalizePassword(password string) string { return norm.NFKC.String(password) }

// passwordError is the BAD_USER_INPUT error of a refused new password.
func passwordError(rule, format string, args ...any) error {
	e := errs.Errorf(errs.CodeBadUserInput, format, args...)
	e.Extensions = map[string]any{"field": "password", "rule": rule}
	return e
}

// CheckNewPassword applies the rules of a new password to password, for an
// account with this e-mail address and name, and returns the password to hash
// (NFKC-normalised). It returns a BAD_USER_INPUT error naming the rule that
// refuses it (extensions.rule, one of the Rule constants; the message never
// contains the password): length counted in Unicode code points after
// normalisation, at least MinPasswordLength and at most MaxPasswordLength;
// not mostly the e-mail address, its local part or the name; not repetitive;
// not on the list of common and breached passwords (compared in lower case).
// Existing passwords are not checked again at login.
func CheckNewPassword(password, email, name string) (string, error) {
	if len(password) > maxPasswordBytes {
		return "", passwordError(RuleTooLong, "password must be at most %d characters", MaxPasswordLength)
	}
	password = NormalizePassword(password)
	n := utf8.RuneCountInString(password)
	if n < MinPasswordLength {
		return "", passwordError(RuleTooShort, "password must be at least %d characters", MinPasswordLength)
	}
	if n > MaxPasswordLength {
		return "", passwordError(RuleTooLong, "password must be at most %d characters", MaxPasswordLength)
	}
	folded := strings.ToLower(password)
	if personal(folded, email, name) {
		return "", passwordError(RulePersonal, "password must not be based on your e-mail address or name")
	}
	if repetitive(folded) {
		return "", passwordError(RuleRepetitive,
			"password must not be one character repeated, a run such as abcdefgh or 98765432, or a short pattern repeated")
	}
	if _, found := slices.BinarySearch(commonPasswords(), folded); found {
		return "", passwordError(RuleCommon,
			"password is too common: it is on a list of passwords often used or exposed in data breaches; choose another")
	}
	return password, nil
}

// personal reports whether the folded password is mostly the e-mail address,
// its local part, the name or one of their words (3 characters or more): one
// of them makes up half of the password or more, or the password is part of
// one of them.
func personal(password, email, name string) bool {
	fold := func(s string) string { return strings.ToLower(NormalizePassword(strings.TrimSpace(s))) }
	email, name = fold(email), fold(name)
	local, _, _ := strings.Cut(email, "@")
	notWord := func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }
	words := append([]string{email, local, name, strings.Join(strings.Fields(name), "")},
		strings.FieldsFunc(local, notWord)...)
	words = append(words, strings.FieldsFunc(name, notWord)...)
	n := utf8.RuneCountInString(password)
	for _, w := range words {
		wn := utf8.RuneCountInString(w)
		if wn < 3 {
			continue
		}
		if strings.Contains(password, w) && 2*wn >= n || strings.Contains(w, password) {
			return true
		}
	}
	return false
}

// repetitive reports whether password is one character repeated, a run of
// consecutive characters up or down (abcdefgh, 98765432), or a block of up
// to 4 characters repeated (abcabcabc, 12341234).
func repetitive(password string) bool {
	r := []rune(password)
	if len(r) < 2 {
		return len(r) == 1
	}
	step := r[1] - r[0]
	run := step >= -1 && step <= 1
	for i := 2; i < len(r) && run; i++ {
		run = r[i]-r[i-1] == step
	}
	if run {
		return true
	}
	for size := 1; size <= 4 && size < len(r); size++ {
		if len(r)%size == 0 && string(r) == strings.Repeat(string(r[:size]), len(r)/size) {
			return true
		}
	}
	return false
}

// commonPasswordsGz is the list of common and breached passwords: the first
// 100,000 distinct passwords of 8 characters or more (NFKC, lower case) of
// SecLists' 10-million-password list, sorted, one a line, gzipped. It is made
// by commonpasswords_gen.go.
//
//go:embed commonpasswords.txt.gz
var commonPasswordsGz []byte

// commonPasswords returns the embedded list, sorted; it is decompressed on
// first use (0.9 MB of text and 1.6 MB of string headers, 32 ms of CPU on the
// bench machine), or by LoadCommonPasswords.
var commonPasswords = sync.OnceValue(func() []string {
	zr, err := gzip.NewReader(bytes.NewReader(commonPasswordsGz))
	if err != nil {
		panic("auth: embedded password list: " + err.Error()) // a build defect, caught by the tests
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		panic("auth: embedded password list: " + err.Error())
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
})

// LoadCommonPasswords decompresses the embedded list of common passwords that
// CheckNewPassword refuses, which it otherwise does on its first call: 32 ms
// of CPU on the bench machine, which the first sign-up after a start paid,
// and which slowed every request that ran beside it (bench/abuse: the slowest
// request of a signed-in client during a burst of sign-ups). A server calls
// it once at start, in the background; later calls return at once.
func LoadCommonPasswords() { commonPasswords() }
