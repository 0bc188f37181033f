package egress_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"taskflow/egress"
	"taskflow/errs"
)

func TestPublic(t *testing.T) {
	t.Parallel()
	for a, want := range map[string]bool{
		"203.0.113.10": true, "8.8.8.8": true, "2001:4860:4860::8888": true,
		"127.0.0.1": false, "127.8.9.10": false, "::1": false, "10.0.0.1": false, "172.16.5.4": false, "192.168.1.1": false,
		"169.254.169.254": false, "fe80::1": false, "fd00:ec2::254": false, "100.100.100.200": false, "0.0.0.0": false,
		"::": false, "224.0.0.1": false, "255.255.255.255": false, "::ffff:127.0.0.1": false, "::ffff:10.0.0.1": false,
		"64:ff9b::a00:1": false, "2002:7f00:1::": false, "198.18.0.1": false, "0.1.2.3": false,
	} {
		if got := egress.Public(netip.MustParseAddr(a)); got != want {
			t.Errorf("Public(%s) = %v, want %v", a, got, want)
		}
	}
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	strict := egress.Policy{}
	for _, u := range []string{"https://203.0.113.10/hook?x=1", "https://[2001:db8::1]:8443/"} {
		if got, err := strict.CheckURL(t.Context(), u); err != nil || got != u {
			t.Errorf("CheckURL(%s) = %q, %v", u, got, err)
		}
	}
	for _, u := range []string{"http://203.0.113.10/", "https://127.0.0.1/", "https://localhost:8080/", "https://[::1]/",
		"https://user@203.0.113.10/", "https://203.0.113.10/#x", "203.0.113.10", "https://:80/", "javascript:alert(1)",
		"https://203.0.113.10:65536/", "https://" + strings.Repeat("x", egress.MaxURLLength) + "/"} {
		if _, err := strict.CheckURL(t.Context(), u); errs.CodeOf(err) != errs.CodeBadUserInput {
			t.Errorf("strict CheckURL(%.50q) = %v, want BAD_USER_INPUT", u, err)
		}
	}
	open := egress.Policy{AllowHTTP: true, AllowPrivate: true}
	for _, u := range []string{"http://127.0.0.1:9000/", "http://localhost/x"} {
		if _, err := open.CheckURL(t.Context(), u); err != nil {
			t.Errorf("open CheckURL(%s): %v", u, err)
		}
	}
}

// The strict client refuses to connect to a loopback receiver, the check
// being on the address dialled (after DNS): nothing reaches the receiver,
// and no redirect is followed by a client that may connect.
func TestClientRefusesAtConnectAndFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	}))
	t.Cleanup(srv.Close)
	// localhost: a name, resolved at dial time, as a rebinding name would be.
	url := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	_, err := egress.Policy{AllowHTTP: true}.Client(egress.ClientOptions{Timeout: 5 * time.Second}).Post(url, "text/plain", nil)
	var refused *egress.RefusedError
	if !errors.As(err, &refused) || !egress.Refused(err) || hits.Load() != 0 {
		t.Fatalf("strict client: %v, %d requests arrived", err, hits.Load())
	}
	res, err := egress.Policy{AllowHTTP: true, AllowPrivate: true}.Client(egress.ClientOptions{Timeout: 5 * time.Second}).Post(url, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusFound || hits.Load() != 1 {
		t.Errorf("a redirect: %d after %d requests, want 302 after 1", res.StatusCode, hits.Load())
	}
}

// CheckURL bounds the raw input to MaxURLLength bytes but returns (and the
// store keeps) u.String(), which percent-encodes non-ASCII path bytes: a URL
// of 2048 bytes comes back three times as long, past the documented bound.
func TestCheckedURLWithinMaxLengthOnceEncoded(t *testing.T) {
	raw := "https://203.0.113.10/" + strings.Repeat("é", (egress.MaxURLLength-21)/2)
	if len(raw) > egress.MaxURLLength {
		t.Fatalf("the test's URL is %d bytes", len(raw))
	}
	got, err := egress.Policy{}.CheckURL(t.Context(), raw)
	if err == nil && len(got) > egress.MaxURLLength || err != nil && !strings.Contains(err.Error(), "once encoded") {
		t.Errorf("CheckURL of a %d-byte URL: %d bytes, %v (MaxURLLength %d)", len(raw), len(got), err, egress.MaxURLLength)
	}
}

// A client of a policy without AllowHTTP sends nothing by plain http, even to
// a URL registered while WEBHOOK_ALLOW_HTTP was on: the scheme is checked on
// every request, as the address is on every connection.
func TestClientSendsNoPlainHTTPUnlessAllowed(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	_, err := egress.Policy{AllowPrivate: true}.Client(egress.ClientOptions{Timeout: 5 * time.Second}).Post(srv.URL, "text/plain", strings.NewReader("x"))
	if !errors.Is(err, egress.ErrPlainHTTP) || hits.Load() != 0 {
		t.Fatalf("https-only client: %v, %d requests arrived", err, hits.Load())
	}
	res, err := egress.Policy{AllowHTTP: true, AllowPrivate: true}.Client(egress.ClientOptions{Timeout: 5 * time.Second}).Post(srv.URL, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if hits.Load() != 1 {
		t.Fatalf("%d requests arrived, want 1", hits.Load())
	}
}
