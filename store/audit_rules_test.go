package store

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"taskflow/audit"
)

// Every domain type the audit log snapshots has a rule on every field.
func TestAuditRulesOnEveryDomainField(t *testing.T) {
	t.Parallel()
	for _, v := range []any{User{}, Workspace{}, Member{}, Project{}, Task{}, Comment{}, Invitation{}, Attachment{}, WebhookEndpoint{}} {
		if err := audit.Check(v); err != nil {
			t.Errorf("%T: %v", v, err)
		}
	}
}

// Any struct of package store that uses audit tags at all has one on every
// exported field: a column added to a domain type without a rule fails here,
// even for a type not listed above.
func TestAuditRulesInSource(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	audited := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			uses, missing := false, []string{}
			for _, fld := range st.Fields.List {
				tag := ""
				if fld.Tag != nil {
					tag, _ = strconv.Unquote(fld.Tag.Value)
				}
				value, has := reflect.StructTag(tag).Lookup("audit")
				uses = uses || has
				rule := audit.Rule(value) // without its option (track,url)
				for _, name := range fld.Names {
					if name.IsExported() && rule != audit.RuleTrack && rule != audit.RuleIgnore && rule != audit.RuleSecret {
						missing = append(missing, name.Name)
					}
				}
			}
			if uses {
				audited++
				if len(missing) > 0 {
					t.Errorf("%s: %s: fields without a valid audit rule: %v", fset.Position(ts.Pos()), ts.Name.Name, missing)
				}
			}
			return true
		})
	}
	if audited < 6 {
		t.Fatalf("found %d audited struct types, want at least the 6 domain types", audited)
	}
}

// A password hash never reaches the log, by snapshot or by diff.
func TestAuditSecretsNeverRecorded(t *testing.T) {
	t.Parallel()
	const secret = "$argon2id$v=19$secret-hash"
	u := User{ID: "u", Email: "a@b.c", Name: "A", PasswordHash: secret}
	u2 := u
	u2.PasswordHash = secret + "-new"
	for name, v := range map[string]any{"snapshot": audit.Snapshot(u), "changes": audit.Changes(u, u2)} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "secret-hash") || strings.Contains(strings.ToLower(string(b)), "argon") {
			t.Errorf("%s leaks the password hash: %s", name, b)
		}
	}
	if c := audit.Changes(u, u2); len(c) != 1 {
		t.Errorf("a password change is not noted: %v", c)
	}
	b, _ := json.Marshal(u)
	if strings.Contains(string(b), "secret-hash") {
		t.Errorf("User's JSON carries the hash: %s", b)
	}
}
