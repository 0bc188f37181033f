package egress_test

import (
	"net/netip"
	"testing"

	"taskflow/egress"
)

// IPv6 addresses outside the global unicast space 2000::/3 are reserved
// (docs/api.md refuses "reserved addresses"), and some embed an IPv4 address
// that a host or a translator may reach: IPv4-compatible ::a.b.c.d (routed
// to the IPv4 address through sit0 on a Linux host with the sit module),
// SIIT's IPv4-translated ::ffff:0:a.b.c.d. Public refused them only when
// mapped (::ffff:a.b.c.d), NAT64, 6to4 or Teredo.
func TestReservedIPv6IsNotPublic(t *testing.T) {
	t.Parallel()
	for _, a := range []string{"::127.0.0.1", "::10.0.0.1", "::169.254.169.254", "::ffff:0:127.0.0.1",
		"::ffff:0:10.0.0.1", "::2", "4000::1", "8000::1", "e000::1", "fb00::1"} {
		if egress.Public(netip.MustParseAddr(a)) {
			t.Errorf("Public(%s) = true, want false: not global unicast", a)
		}
	}
	for _, a := range []string{"2001:4860:4860::8888", "2606:4700:4700::1111", "2a00:1450:4001:80b::200e"} {
		if !egress.Public(netip.MustParseAddr(a)) {
			t.Errorf("Public(%s) = false, want true", a)
		}
	}
}
