package auth

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"taskflow/errs"
)

// Each rule refuses what it should with BAD_USER_INPUT naming it, in a
// message that contains neither the password nor the e-mail address, and
// lets the rest through, normalised.
func TestCheckNewPasswordRules(t *testing.T) {
	t.Parallel()
	const email, name = "alice.smith@example.com", "Ada Lovelace"
	long := strings.Repeat("Tr0ub4dor&3 x", 79)[:MaxPasswordLength] // 1024 characters
	umlauts := string([]rune(strings.Repeat("Grüße aus Köln, ", 65))[:MaxPasswordLength])
	cases := []struct {
		password, rule string
	}{
		{"1234567", RuleTooShort},
		{"e\u0301e\u0301e\u0301e\u0301", RuleTooShort}, // 8 code points as typed, 4 once composed (NFKC)
		{long + "x", RuleTooLong},
		{strings.Repeat("é", MaxPasswordLength+1), RuleTooLong},
		{strings.Repeat("x", maxPasswordBytes+1), RuleTooLong}, // refused before any Unicode work
		{email, RulePersonal},
		{"ALICE.SMITH", RulePersonal},   // the local part, in any case
		{"smith2024!", RulePersonal},    // a word of the local part is half of it
		{"lovelace1815", RulePersonal},  // a word of the name
		{"AdaLovelace", RulePersonal},   // the name without its space
		{"smith@example", RulePersonal}, // part of the e-mail address
		{"        ", RuleRepetitive},    // eight spaces
		{"aaaaaaaaaaaa", RuleRepetitive},
		{"12345678", RuleRepetitive}, // a run up
		{"98765432", RuleRepetitive}, // a run down
		{"abcdefghij", RuleRepetitive},
		{"abcabcabc", RuleRepetitive}, // a short block repeated
		{"12341234", RuleRepetitive},
		{"password", RuleCommon},
		{"PassWord", RuleCommon}, // compared in lower case
		{"ｐａｓｓｗｏｒｄ", RuleCommon}, // full-width letters are the same password (NFKC)
		{"iloveyou", RuleCommon},
		{"qwertyuiop", RuleCommon},
		{"trustno1", RuleCommon},
		{"football123", RuleCommon},
		{"sunshine1", RuleCommon},
		{"michael1", RuleCommon},
		{"superman", RuleCommon},
		{"1qaz2wsx", RuleCommon},
		{"baseball", RuleCommon},
		{"correct horse", ""},           // the examples of the documentation
		{"k3v!9qzp", ""},                // 8 characters are enough
		{"ada loves mathematics", ""},   // a short word of the name in a long password
		{"smith & wesson revolver", ""}, // a word of the e-mail, under half of the password
		{long, ""},                      // MaxPasswordLength characters
		{umlauts, ""},                   // 1024 characters in more bytes: counted in characters
		{"ｃｏｒｒｅｃｔ ｈｏｒｓｅ", ""},           // accepted, and returned normalised
		{"pass word with spaces", ""},
		{"Zürich Hauptbahnhof 7:42", ""},
		{"\u0645\u0631\u062d\u0628\u0627 \u0628\u0643\u0645 \u062c\u0645\u064a\u0639\u0627", ""},
	}
	messages := map[string]string{}
	for _, c := range cases {
		got, err := CheckNewPassword(c.password, email, name)
		if c.rule == "" {
			if err != nil {
				t.Errorf("%q refused: %v", c.password, err)
			} else if got != NormalizePassword(c.password) {
				t.Errorf("%q returned as %q, want its NFKC form", c.password, got)
			}
			continue
		}
		var e *errs.Error
		if !errors.As(err, &e) || e.Code != errs.CodeBadUserInput || e.Extensions["rule"] != c.rule || e.Extensions["field"] != "password" {
			t.Errorf("%q: %#v, want BAD_USER_INPUT rule %s", c.password, err, c.rule)
			continue
		}
		// One message per rule, whatever the input: it cannot echo the password.
		if m, ok := messages[c.rule]; ok && m != e.Message || !strings.HasPrefix(e.Message, "password ") {
			t.Errorf("%q: message %q, want %q", c.password, e.Message, m)
		}
		messages[c.rule] = e.Message
	}
	if len(messages) != 5 {
		t.Errorf("rules seen: %v", messages)
	}
	if got, _ := CheckNewPassword("ｃｏｒｒｅｃｔ ｈｏｒｓｅ", email, name); got != "correct horse" {
		t.Errorf("full-width password returned as %q", got)
	}
}

// The embedded list is what CheckNewPassword searches: sorted, normalised,
// long enough to matter, small in the binary.
func TestCommonPasswordList(t *testing.T) {
	t.Parallel()
	list := commonPasswords()
	if len(list) != 100000 || !slices.IsSorted(list) {
		t.Fatalf("%d passwords, sorted %v", len(list), slices.IsSorted(list))
	}
	for _, p := range list {
		if utf8.RuneCountInString(p) < MinPasswordLength || strings.ToLower(NormalizePassword(p)) != p {
			t.Fatalf("entry %q is shorter than %d characters or not normalised", p, MinPasswordLength)
		}
	}
	for _, p := range []string{"password", "iloveyou", "12345678", "sunshine"} {
		if _, ok := slices.BinarySearch(list, p); !ok {
			t.Errorf("%q is not on the list", p)
		}
	}
	if len(commonPasswordsGz) > 512<<10 {
		t.Errorf("embedded list is %d bytes", len(commonPasswordsGz))
	}
}
