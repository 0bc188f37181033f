// Package egress guards what leaves the server on a user's behalf (webhook
// deliveries): which URLs may be registered, and an HTTP client that connects
// only to the addresses the policy allows, checked on the address it
// connects to, after DNS, so that a name that resolves elsewhere later (DNS
// rebinding) gains nothing. It is a leaf package (errs aside).
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"taskflow/errs"
)

// Policy says where outgoing requests may go. The zero value is the strict
// one: https only, to public addresses only.
type Policy struct {
	// AllowHTTP accepts http:// URLs as well as https:// (WEBHOOK_ALLOW_HTTP).
	AllowHTTP bool
	// AllowPrivate accepts loopback, private, link-local, metadata and other
	// non-public addresses (WEBHOOK_ALLOW_PRIVATE): for tests and on-premise
	// receivers on the server's own network.
	AllowPrivate bool
}

// MaxURLLength is the longest URL accepted, in bytes.
const MaxURLLength = 2048

// resolveTimeout bounds the DNS lookup of CheckURL.
const resolveTimeout = 3 * time.Second

// nonPublic are the ranges refused unless AllowPrivate, besides what netip
// classifies as loopback, private, link-local, multicast or unspecified.
// IPv4-mapped IPv6 addresses are unmapped first; the IPv6 ranges that embed
// an IPv4 address (NAT64, 6to4, Teredo) are refused whole, as is every IPv6
// address outside the global unicast space 2000::/3 (Public).
var nonPublic = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",      // "this network"
		"100.64.0.0/10",  // carrier-grade NAT (and Alibaba Cloud's metadata, 100.100.100.200)
		"192.0.0.0/24",   // IETF protocol assignments
		"198.18.0.0/15",  // benchmarking
		"240.0.0.0/4",    // reserved, and the broadcast address
		"64:ff9b::/96",   // NAT64
		"64:ff9b:1::/48", // local NAT64
		"2002::/16",      // 6to4
		"2001::/32",      // Teredo
		"100::/64",       // discard
		"fec0::/10",      // site-local (deprecated)
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// Public reports whether a is a public unicast address: not loopback,
// private (RFC 1918, fc00::/7, which holds AWS's fd00:ec2::254), link-local
// (169.254.0.0/16, which holds the cloud metadata address 169.254.169.254,
// and fe80::/10), multicast, unspecified, an IPv6 address outside 2000::/3,
// or one of the other non-public ranges.
func Public(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return false
	}
	if a.Is6() && !globalUnicast6.Contains(a) {
		// Reserved: ::/8 holds the IPv4-compatible ::a.b.c.d (which a Linux
		// host with the sit module routes to a.b.c.d) and SIIT's
		// ::ffff:0:a.b.c.d.
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// globalUnicast6 is the IPv6 global unicast space: every other IPv6 address
// is reserved, unique-local, link-local or multicast.
var globalUnicast6 = netip.MustParsePrefix("2000::/3")

// Allowed reports whether the policy lets a request connect to a.
func (p Policy) Allowed(a netip.Addr) bool { return p.AllowPrivate || Public(a) }

// RefusedError is the error of a connection the policy refused.
type RefusedError struct{ Addr netip.Addr }

// Error names the address.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("refused to connect to %s: not a public address (WEBHOOK_ALLOW_PRIVATE allows it)", e.Addr)
}

// badURL is the BAD_USER_INPUT error of a refused URL.
func badURL(format string, a ...any) error {
	return errs.Errorf(errs.CodeBadUserInput, "url: "+format, a...)
}

// CheckURL validates a URL to register: https (or http when AllowHTTP) with
// a host, no user name or password, no fragment, at most MaxURLLength bytes,
// and a host whose every address (an IP literal, or what DNS answers now) the
// policy allows. It returns the URL as it will be used, or BAD_USER_INPUT
// saying what is wrong. Connections are checked again when they are made
// (Client): DNS may answer differently then.
func (p Policy) CheckURL(ctx context.Context, raw string) (string, error) {
	if len(raw) > MaxURLLength {
		return "", badURL("at most %d bytes", MaxURLLength)
	}
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || !u.IsAbs() || u.Opaque != "" {
		return "", badURL("not an absolute URL like https://hooks.example.com/taskflow")
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && p.AllowHTTP:
	case u.Scheme == "http":
		return "", badURL("must be https (the server's WEBHOOK_ALLOW_HTTP allows http)")
	default:
		return "", badURL("must be https")
	}
	if u.User != nil {
		return "", badURL("must not hold a user name or password: the signature authenticates deliveries")
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return "", badURL("must not have a fragment (#...)")
	}
	host := u.Hostname()
	if host == "" {
		return "", badURL("has no host")
	}
	if port := u.Port(); port != "" {
		if n, err := netip.ParseAddrPort("0.0.0.0:" + port); err != nil || n.Port() == 0 {
			return "", badURL("the port must be a number from 1 to 65535")
		}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if !p.Allowed(a) {
			return "", badURL("%s is not a public address (loopback, private, link-local, metadata and reserved addresses are refused)", host)
		}
	} else {
		// A name: whether it does not resolve or resolves to an address
		// refused, one answer that names no address, else anyone (any user
		// may make a workspace) could map the server's internal DNS.
		addrs, err := p.resolve(ctx, host)
		for _, a := range addrs {
			if !p.Allowed(a) {
				err = errNotPublic
			}
		}
		if err != nil {
			return "", badURL("%s", NotPublicHost(host))
		}
	}
	// The URL as it will be used percent-encodes what the input did not (é
	// is %C3%A9): the bound holds for it too.
	s := u.String()
	if len(s) > MaxURLLength {
		return "", badURL("at most %d bytes once encoded (it is %d)", MaxURLLength, len(s))
	}
	return s, nil
}

// errNotPublic is a name that does not resolve only to allowed addresses.
var errNotPublic = errors.New("not public")

// NotPublicHost says that the name host does not resolve, or resolves to an
// address the policy refuses, without saying which (nor the address, nor
// the resolver's): the text of a refused URL and of a refused attempt's
// lastError, which the workspace's admins read.
func NotPublicHost(host string) string {
	return fmt.Sprintf("the host %s does not resolve to public addresses only (a name that does not resolve, "+
		"or that resolves to a loopback, private, link-local, metadata or reserved address, is refused)", host)
}

// resolve returns the addresses of the name host, what DNS answers within
// resolveTimeout.
func (p Policy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err == nil && len(addrs) == 0 {
		err = errNotPublic
	}
	return addrs, err
}

// control refuses, at connect time, an address the policy does not allow:
// the address is the one the socket is about to connect to, after DNS.
func (p Policy) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("egress: unexpected address %q", address)
	}
	if !p.Allowed(ap.Addr()) {
		return &RefusedError{Addr: ap.Addr().Unmap()}
	}
	return nil
}

// Refused reports whether err is (or wraps) a connection the policy refused.
func Refused(err error) bool {
	var r *RefusedError
	return errors.As(err, &r)
}

// Unresolved reports whether err is (or wraps) a DNS lookup that failed.
func Unresolved(err error) bool {
	var d *net.DNSError
	return errors.As(err, &d)
}

// ClientOptions shape the HTTP client of a Policy.
type ClientOptions struct {
	// Timeout bounds one request, from dialing to the end of the body.
	Timeout time.Duration
	// Wrap, if set, wraps the transport (tracing's propagating transport).
	Wrap func(http.RoundTripper) http.RoundTripper
}

// Client returns an HTTP client that connects only where the policy allows
// (checked on every connection), sends nothing by plain http unless the
// policy allows it (checked on every request: a URL registered while
// WEBHOOK_ALLOW_HTTP was on is refused once it is off), uses no proxy from the environment (a proxy
// would connect in its place), follows no redirect (a 3xx is the answer),
// bounds response headers to 64 KiB and each request to Timeout.
func (p Policy) Client(o ClientOptions) *http.Client {
	dialer := &net.Dialer{Timeout: o.Timeout, KeepAlive: 30 * time.Second, Control: p.control}
	var rt http.RoundTripper = &http.Transport{
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    o.Timeout,
		ResponseHeaderTimeout:  o.Timeout,
		MaxResponseHeaderBytes: 64 << 10,
	}
	if !p.AllowHTTP {
		rt = httpsOnly{rt}
	}
	if o.Wrap != nil {
		rt = o.Wrap(rt)
	}
	return &http.Client{
		Transport:     rt,
		Timeout:       o.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// ErrPlainHTTP refuses a request by plain http under a policy that allows
// https only.
var ErrPlainHTTP = errors.New("refused to send by plain http: the URL must be https (the server's WEBHOOK_ALLOW_HTTP allows http)")

// httpsOnly is a transport that sends https requests only (ErrPlainHTTP).
type httpsOnly struct{ next http.RoundTripper }

func (t httpsOnly) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != "https" {
		if r.Body != nil {
			_ = r.Body.Close() // a RoundTripper closes the body, even when it fails
		}
		return nil, ErrPlainHTTP
	}
	return t.next.RoundTrip(r)
}
