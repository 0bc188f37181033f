package httpapi

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Proxies is the set of TRUSTED_PROXIES networks.
type Proxies []netip.Prefix

// ParseProxies parses a comma-separated list of CIDRs or addresses.
func ParseProxies(s string) (Proxies, error) {
	var out Proxies
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !strings.Contains(part, "/") {
			a, err := netip.ParseAddr(part)
			if err != nil {
				return nil, fmt.Errorf("TRUSTED_PROXIES: %q is not a CIDR or address", part)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(part)
		if err != nil {
			return nil, fmt.Errorf("TRUSTED_PROXIES: %q is not a CIDR", part)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// trusted reports whether a is one of the proxies.
func (ps Proxies) trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ClientIP returns the client address of r: the TCP peer, unless the peer is a
// trusted proxy, in which case the right-most address of X-Forwarded-For that is
// not a trusted proxy (a client can prepend anything, but not append).
func (ps Proxies) ClientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	peer = peer.Unmap()
	if !ps.trusted(peer) {
		return peer.String()
	}
	hops := r.Header.Values("X-Forwarded-For")
	var addrs []string
	for _, h := range hops {
		addrs = append(addrs, strings.Split(h, ",")...)
	}
	for i := len(addrs) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(addrs[i]))
		if err != nil {
			// Garbage in the chain: stop at the last address we could trust.
			break
		}
		if !ps.trusted(a) {
			return a.Unmap().String()
		}
		peer = a.Unmap()
	}
	return peer.String()
}
