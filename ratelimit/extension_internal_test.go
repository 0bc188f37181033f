package ratelimit

import "testing"

// An anonymous caller is counted by its IPv4 address, or by the /64 network
// of its IPv6 address, whichever way the address is written.
func TestClientNetwork(t *testing.T) {
	t.Parallel()
	for ip, want := range map[string]string{
		"203.0.113.7":                    "203.0.113.7",
		"::ffff:203.0.113.7":             "203.0.113.7",
		"2001:db8:1:2::1":                "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff:ffff:ffff:ff": "2001:db8:1:2::/64",
		"2001:DB8:1:2::abcd":             "2001:db8:1:2::/64",
		"fe80::1%eth0":                   "fe80::/64",
		"::1":                            "::/64",
		"not an address":                 "not an address",
		"":                               "",
	} {
		if got := ClientNetwork(ip); got != want {
			t.Errorf("ClientNetwork(%q) = %q, want %q", ip, got, want)
		}
	}
}
