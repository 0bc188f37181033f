package egress_test

import (
	"strings"
	"testing"

	"taskflow/egress"
	"taskflow/errs"
)

// A name refused at registration says neither the address it resolves to
// nor whether it resolves at all: anyone may create a workspace, so both
// would let any user map the server's internal DNS (db.internal is
// 10.0.0.5, vault.internal does not exist) by registering URLs. localhost
// resolves through /etc/hosts to a loopback address; .invalid never
// resolves.
func TestRefusedNameNamesNoAddressAndNoResolution(t *testing.T) {
	t.Parallel()
	p := egress.Policy{}
	_, private := p.CheckURL(t.Context(), "https://localhost/hook")
	_, missing := p.CheckURL(t.Context(), "https://no-such-host.invalid/hook")
	if errs.CodeOf(private) != errs.CodeBadUserInput || errs.CodeOf(missing) != errs.CodeBadUserInput {
		t.Fatalf("CheckURL: %v; %v; want BAD_USER_INPUT", private, missing)
	}
	if m := private.Error(); strings.Contains(m, "127.0.0.1") || strings.Contains(m, "::1") {
		t.Errorf("the refusal of localhost names its address: %q", m)
	}
	if a, b := strings.Replace(private.Error(), "localhost", "H", 1), strings.Replace(missing.Error(), "no-such-host.invalid", "H", 1); a != b {
		t.Errorf("a name that resolves to a private address and one that does not resolve are told apart:\n%q\n%q", a, b)
	}
}
