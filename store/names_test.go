package store_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"

	"taskflow/errs"
	"taskflow/store"
	"taskflow/store/storetest"
)

// refusedNames are names each holding one character a new name may not hold,
// by class, with that character: the message names it.
var refusedNames = []struct {
	class, name string
	r           rune
}{
	{"C0 control (ANSI escape)", "Alice\x1b[31m red", 0x1B},
	{"C0 control (tab)", "Alice\tBob", 0x09},
	{"C0 control (line feed)", "Alice\nBob", 0x0A},
	{"DEL", "Alice\x7f", 0x7F},
	{"C1 control (CSI)", "Alice\u009b31m", 0x9B},
	{"C1 control (next line)", "Alice\u0085Bob", 0x85},
	{"right-to-left override", "Alice\u202Egnp.exe", 0x202E},
	{"left-to-right embedding", "\u202AAlice", 0x202A},
	{"left-to-right mark", "Alice\u200E", 0x200E},
	{"first strong isolate", "Ali\u2068ce", 0x2068},
	{"left-to-right isolate", "Ali\u2066ce", 0x2066},
	{"right-to-left isolate", "Ali\u2067ce", 0x2067},
	{"pop directional isolate", "Alice\u2069", 0x2069},
	{"arabic letter mark", "Alice\u061C", 0x061C},
	{"zero width space", "admin\u200b", 0x200B},
	{"zero width non-joiner", "ad\u200cmin", 0x200C},
	{"word joiner", "ad\u2060min", 0x2060},
	{"byte-order mark", "\ufeffadmin", 0xFEFF},
	{"soft hyphen", "ad\u00admin", 0xAD},
	{"tag character", "admin\U000E0041", 0xE0041},
	{"mongolian vowel separator", "admin\u180E", 0x180E},
	{"Hangul filler (default ignorable)", "admin\u3164", 0x3164},
	{"halfwidth Hangul filler", "admin\uFFA0x", 0xFFA0},
	{"combining grapheme joiner", "ad\u034Fmin", 0x034F},
	{"no-break space", "Alice\u00a0Smith", 0xA0},
	{"narrow no-break space", "Alice\u202FSmith", 0x202F},
	{"em space", "Alice\u2003Smith", 0x2003},
	{"hair space", "Ali\u200Ace", 0x200A},
	{"line separator", "Alice\u2028Smith", 0x2028},
	{"paragraph separator", "Alice\u2029Smith", 0x2029},
	// A zero width joiner joins two emoji, nothing else.
	{"joiner after a letter", "admin\u200d", 0x200D},
	{"joiner between letters", "ad\u200dmin", 0x200D},
	{"joiner after an emoji, before a letter", "\U0001F468\u200dx", 0x200D},
	{"joiner before an emoji, after a letter", "x\u200d\U0001F469", 0x200D},
	{"joiner ending a name", "Bob \U0001F468\u200d", 0x200D},
	{"joiner starting a name", "\u200d\U0001F469 Bob", 0x200D},
	{"two joiners", "\U0001F468\u200d\u200d\U0001F469", 0x200D},
	// Only between emoji (Extended_Pictographic), not between other symbols.
	{"joiner between degree Celsius signs (a letterlike symbol)", "20\u2103\u200d\u2103", 0x200D},
	{"joiner between braille patterns", "\u2801\u200d\u2802", 0x200D},
	{"joiner between box drawings", "\u2500\u200d\u2500", 0x200D},
	{"joiner between parenthesized letters", "\U0001F110\u200d\U0001F111", 0x200D},
	{"joiner between a circled letter and an emoji", "\u24B6\u200d\U0001F469", 0x200D},
	{"joiner between an emoji and a math symbol", "\U0001F468\u200d\u2211", 0x200D},
	// A non-joiner or joiner inside a word of a joining script only.
	{"non-joiner between Latin letters", "ad\u200cmin", 0x200C},
	{"non-joiner ending a Persian name", "\u0645\u06cc\u200c", 0x200C},
	{"non-joiner between Persian and Latin", "\u0645\u06cc\u200cx", 0x200C},
	{"non-joiner between two scripts", "\u0645\u200c\u0915", 0x200C},
	{"non-joiner before a space", "\u0645\u06cc\u200c \u0645", 0x200C},
	// A variation selector follows a character it has a variation of.
	{"emoji presentation selector after a letter", "admin\uFE0F", 0xFE0F},
	{"text presentation selector after a letter", "admin\uFE0E", 0xFE0E},
	{"emoji presentation selector starting a name", "\uFE0Fadmin", 0xFE0F},
	{"emoji presentation selector after an ideograph", "\u5C71\uFE0F", 0xFE0F},
	{"two emoji presentation selectors", "\u2764\uFE0F\uFE0F", 0xFE0F},
	// U+FE0E and U+FE0F follow only a base of emoji-variation-sequences.txt,
	// not any symbol.
	{"emoji presentation selector after a symbol with no emoji variation (black star)", "\u2605\uFE0F", 0xFE0F},
	{"text presentation selector after an emoji with no text variation (rocket)", "Team \U0001F680\uFE0E", 0xFE0E},
	{"emoji presentation selector after an emoji with no variation (grinning face)", "\U0001F600\uFE0F", 0xFE0F},
	{"emoji presentation selector after the degree Celsius sign", "20\u2103\uFE0F", 0xFE0F},
	{"variation selector 1 between Latin letters", "adm\uFE00in", 0xFE00},
	{"ideographic variation selector after a letter", "admin\U000E0100", 0xE0100},
	{"last ideographic variation selector after a digit", "admin1\U000E01EF", 0xE01EF},
	{"Mongolian free variation selector after a Latin letter", "admin\u180B", 0x180B},
	// Blank symbols, neither spaces nor default ignorable.
	{"braille pattern blank", "admin\u2800", 0x2800},
	{"braille pattern blank alone", "\u2800", 0x2800},
	{"musical symbol null notehead", "ad\U0001D159min", 0x1D159},
}

// acceptedNames are names a new name may be: letters of any script, marks,
// plain and ideographic spaces, emoji and their ZWJ sequences.
var acceptedNames = []string{
	"Zoë O'Brien-Smith",
	"e\u0301mile",     // a combining mark
	"山田\u3000太郎",      // an ideographic space between family and given name
	"محمد علي",        // right-to-left script, no control
	"Team \U0001F680", // an emoji
	"\U0001F468\u200d\U0001F469\u200d\U0001F467",                   // family: man, woman, girl
	"\U0001F3F3\uFE0F\u200d\U0001F308 Pride",                       // rainbow flag: a variation selector before the joiner
	"\U0001F469\U0001F3FD\u200d\U0001F4BB Dev",                     // woman technologist: a skin tone before the joiner
	"Runner \U0001F3C3\u200d\u2640\uFE0F",                          // woman running
	"\u2764\uFE0F\u200d\U0001F525",                                 // heart on fire
	"\U0001F9D1\u200d\U0001F91D\u200d\U0001F9D1 Partners",          // people holding hands
	"  Trimmed\u00a0",                                              // spaces at the ends are trimmed, whatever their kind
	"\u0645\u062d\u0645\u062f\u06cc\u200c\u0646\u0698\u0627\u062f", // Persian: a non-joiner inside a surname (Mohammadi-Nejad)
	"\u0915\u094d\u200d\u0937",                                     // Devanagari: a joiner after a virama picks a conjunct's form
	"\u0d28\u0d4d\u200c\u0d28",                                     // Malayalam: a non-joiner after a virama
	"Keycap 1\uFE0F\u20E3",                                         // a keycap: digit, emoji selector, enclosing keycap
	"\u00A9\uFE0F \u203C\uFE0F",                                    // emoji presentation of the copyright sign and of a punctuation emoji
	"Tea \u2615\uFE0E",                                             // text presentation of an emoji
	"\u2122\uFE0F \U0001F170\uFE0F \U0001F44D\uFE0E",               // symbols with an emoji and a text variation
	"Done \u2705\uFE0F \u2728\uFE0E",                               // bases added by Unicode 15.1
	"\u8FBB\U000E0100 \u845B\U000E0101",                            // ideographic variation sequences (Han)
	"\u2229\uFE00 0\uFE00",                                         // standardized variants: intersection with serifs, zero with a short stroke
	"\u1820\u180B",                                                 // Mongolian: a free variation selector after a letter

	// Emoji ZWJ sequences (emoji-zwj-sequences.txt): transgender flag, polar
	// bear, pirate flag; phoenix, lime, broken chain (Unicode 15.1); person
	// walking facing right with a skin tone, person with red hair; eye in
	// speech bubble, mending heart.
	"\U0001F3F3\uFE0F\u200d\u26A7\uFE0F \U0001F43B\u200d\u2744\uFE0F \U0001F3F4\u200d\u2620\uFE0F",
	"\U0001F426\u200d\U0001F525 \U0001F34B\u200d\U0001F7E9 \u26D3\uFE0F\u200d\U0001F4A5",
	"\U0001F6B6\U0001F3FD\u200d\u27A1\uFE0F \U0001F9D1\u200d\U0001F9B0",
	"\U0001F441\uFE0F\u200d\U0001F5E8\uFE0F \u2764\uFE0F\u200d\U0001FA79",
}

// TestNewNamesRefuseInvisibleCharacters gives each path that stores a new
// name (a user's, a workspace's, a project's, a project's rename) every
// refused name, each BAD_USER_INPUT naming the field and the code point and
// changing nothing, then every accepted one.
func TestNewNamesRefuseInvisibleCharacters(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := context.Background()
	owner := mkUser(t, db, "owner@example.com")
	ws, err := db.CreateWorkspace(ctx, owner, "W")
	if err != nil {
		t.Fatal(err)
	}
	p, err := db.CreateProject(ctx, owner, ws.ID, "P", nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	paths := []struct {
		what  string
		store func(name string) (string, error)
	}{
		{"CleanUserName", store.CleanUserName},
		{"CreateUser", func(name string) (string, error) {
			n++
			token := sha256.Sum256([]byte(fmt.Sprint(n)))
			u, err := db.CreateUser(ctx, fmt.Sprintf("u%d@example.com", n), name, "x", token[:])
			if err != nil {
				return "", err
			}
			return u.Name, nil
		}},
		{"CreateWorkspace", func(name string) (string, error) {
			w, err := db.CreateWorkspace(ctx, owner, name)
			if err != nil {
				return "", err
			}
			return w.Name, nil
		}},
		{"CreateProject", func(name string) (string, error) {
			p, err := db.CreateProject(ctx, owner, ws.ID, name, nil)
			if err != nil {
				return "", err
			}
			return p.Name, nil
		}},
		{"UpdateProject", func(name string) (string, error) {
			p, err := db.UpdateProject(ctx, owner, p.ID, store.ProjectPatch{Name: &name})
			if err != nil {
				return "", err
			}
			return p.Name, nil
		}},
	}
	before := storetest.Snapshot(t, db.Pool)
	for _, path := range paths {
		for _, c := range refusedNames {
			_, err := path.store(c.name)
			want := fmt.Sprintf("(U+%04X)", c.r)
			if errs.CodeOf(err) != errs.CodeBadUserInput || !strings.HasPrefix(err.Error(), "name: ") || !strings.Contains(err.Error(), want) {
				t.Errorf("%s of a name with a %s (%q): %v; want BAD_USER_INPUT \"name: ... %s\"", path.what, c.class, c.name, err, want)
			}
		}
	}
	storetest.AssertUnchanged(t, db.Pool, before, "refused names")
	for _, path := range paths {
		for _, name := range acceptedNames {
			got, err := path.store(name)
			if want := strings.TrimSpace(name); err != nil || got != want {
				t.Errorf("%s(%q) = %q, %v; want %q", path.what, name, got, err, want)
			}
		}
	}
}

// TestNamesStoredBeforeTheRuleStillWork stores names the rule refuses as a
// server of before it did, then reads them, signs in, and edits the project:
// its description and an unchanged name are taken, a rename to a good name
// too, a rename to another bad name is refused.
func TestNamesStoredBeforeTheRuleStillWork(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := context.Background()
	const bad = "admin\u200b \u202Egnp.exe\uFE0F\u2800"
	u := mkUser(t, db, "old@example.com")
	if _, err := db.Pool.Exec(ctx, `UPDATE users SET name = $2 WHERE id = $1`, u.ID, bad); err != nil {
		t.Fatal(err)
	}
	ws, err := db.CreateWorkspace(ctx, u, "W")
	if err != nil {
		t.Fatal(err)
	}
	p, err := db.CreateProject(ctx, u, ws.ID, "P", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE workspaces SET name = $2 WHERE id = $1;`, ws.ID, bad); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE projects SET name = $2 WHERE id = $1`, p.ID, bad); err != nil {
		t.Fatal(err)
	}
	if m, err := db.UsersByIDs(ctx, []string{u.ID}); err != nil || m[u.ID] == nil || m[u.ID].Name != bad {
		t.Fatalf("UsersByIDs = %v, %v", m, err)
	}
	signedIn, err := db.UserByEmail(ctx, "old@example.com")
	if err != nil || signedIn.Name != bad {
		t.Fatalf("UserByEmail = %v, %v", signedIn, err)
	}
	if err := db.CreateSession(ctx, signedIn, []byte("0123456789abcdef0123456789abcdef"), ""); err != nil {
		t.Fatalf("CreateSession of a user with an old name: %v", err)
	}
	if m, err := db.WorkspacesByIDs(ctx, u.ID, []string{ws.ID}); err != nil || m[ws.ID] == nil || m[ws.ID].Name != bad {
		t.Fatalf("WorkspacesByIDs = %v, %v", m, err)
	}
	if m, err := db.ProjectsByIDs(ctx, u.ID, []string{p.ID}); err != nil || m[p.ID] == nil || m[p.ID].Name != bad {
		t.Fatalf("ProjectsByIDs = %v, %v", m, err)
	}
	desc := "new description"
	got, err := db.UpdateProject(ctx, u, p.ID, store.ProjectPatch{Description: &desc, SetDescription: true})
	if err != nil || got.Name != bad || got.Description == nil || *got.Description != desc {
		t.Fatalf("UpdateProject of the description = %+v, %v", got, err)
	}
	// A form that sends every field sends the old name back unchanged.
	same, desc2 := " "+bad+" ", "another"
	got, err = db.UpdateProject(ctx, u, p.ID, store.ProjectPatch{Name: &same, Description: &desc2, SetDescription: true})
	if err != nil || got.Name != bad || *got.Description != desc2 {
		t.Fatalf("UpdateProject with the old name unchanged = %+v, %v", got, err)
	}
	before := storetest.Snapshot(t, db.Pool)
	other := "admin\u2066"
	if _, err := db.UpdateProject(ctx, u, p.ID, store.ProjectPatch{Name: &other}); errs.CodeOf(err) != errs.CodeBadUserInput ||
		err.Error() != "name: holds an invisible or formatting character (U+2066)" {
		t.Fatalf("UpdateProject to another bad name: %v", err)
	}
	storetest.AssertUnchanged(t, db.Pool, before, "a rename to another bad name")
	good := "admin"
	if got, err := db.UpdateProject(ctx, u, p.ID, store.ProjectPatch{Name: &good}); err != nil || got.Name != good {
		t.Fatalf("UpdateProject to a good name = %+v, %v", got, err)
	}
	// Once renamed, the old name is a new name like any other.
	if _, err := db.UpdateProject(ctx, u, p.ID, store.ProjectPatch{Name: &same}); errs.CodeOf(err) != errs.CodeBadUserInput {
		t.Fatalf("UpdateProject back to the old bad name: %v", err)
	}
}

// TestNewEmailRefusesWhatNamesRefuse: a new e-mail address is refused for
// every character a name is (one rule, hiddenRune), the spaces and the
// joiners a name keeps too; NormalizeEmail (sign-in) still takes them.
func TestNewEmailRefusesWhatNamesRefuse(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"ceo\u3164@corp.com", "ceo\uFFA0@corp.com", "c\u034Feo@corp.com", "ceo\U000E0041@corp.com",
		"ceo\u3000x@corp.com", "\U0001F468\u200d\U0001F469@corp.com", "ceo\u200b@corp.com", "ceo\uFE0F@corp.com",
		"\u2764\uFE0F@corp.com", "ceo\u2800@corp.com"} {
		if _, err := store.NewEmail(c); errs.CodeOf(err) != errs.CodeBadUserInput {
			t.Errorf("NewEmail(%q): %v, want BAD_USER_INPUT", c, err)
		}
	}
	if got, err := store.NormalizeEmail("CEO\u3164@corp.com"); err != nil || got != "ceo\u3164@corp.com" {
		t.Errorf("NormalizeEmail of an address with a Hangul filler = %q, %v", got, err)
	}
}
