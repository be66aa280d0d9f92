package queue

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A job submitter names the webhook URL, so without a policy anyone with a
// key could make Berth POST to its own host's loopback services, to a cloud
// metadata service or to Berth itself. WebhookGuard decides which addresses
// a webhook may reach and enforces it where the connection is made: on the
// address actually dialled, after resolution (so a name that resolves to an
// allowed address once and a forbidden one later gains nothing), on every
// redirect hop, and with no proxy in between.

// ErrWebhookForbidden is returned (wrapped) when a webhook's address is not
// allowed by the policy.
var ErrWebhookForbidden = errors.New("webhook address not allowed")

// WebhookPolicy configures a WebhookGuard. The zero value is the default
// policy: no loopback, link-local (169.254.0.0/16 with the cloud metadata
// address, fe80::/10), unspecified, multicast or broadcast addresses, no
// known cloud metadata addresses, and never Berth's own listeners. Private
// ranges (10/8, 172.16/12, 192.168/16, fc00::/7, 100.64/10) and public
// addresses are allowed: a homelab's webhook receiver is usually on the LAN.
type WebhookPolicy struct {
	// Allow opens addresses the defaults forbid: CIDRs ("127.0.0.0/8"),
	// single addresses ("::1") or host names ("receiver.lan", matched
	// against the URL's host as written, whatever it resolves to). Berth's
	// own listeners stay forbidden.
	Allow []string
	// Lookup resolves a host name [net.DefaultResolver.LookupNetIP]; tests
	// stub it.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// Dial connects to an address the policy allowed ("ip:port")
	// [a net.Dialer with a 10s timeout]; tests stub it.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// ParseWebhookAllow splits a comma-separated --webhook-allow value and
// checks each entry, so a typo fails at start-up rather than at delivery.
func ParseWebhookAllow(s string) ([]string, error) {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		if _, _, err := parseAllow(e); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func parseAllow(e string) (netip.Prefix, string, error) {
	if p, err := netip.ParsePrefix(e); err == nil {
		return p.Masked(), "", nil
	}
	if a, err := netip.ParseAddr(e); err == nil {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), "", nil
	}
	h := strings.ToLower(strings.TrimSuffix(e, "."))
	if h == "" || strings.ContainsAny(h, "/: ") {
		return netip.Prefix{}, "", fmt.Errorf("--webhook-allow: %q is neither a CIDR, an IP address nor a host name", e)
	}
	return netip.Prefix{}, h, nil
}

// forbidden is the default policy's list, each with the reason given in
// errors. Order matters only for the reason reported.
var forbidden = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "the cloud metadata service"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "the cloud metadata service"},
	{netip.MustParsePrefix("100.100.100.200/32"), "the cloud metadata service"},
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
}

var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// WebhookGuard enforces a WebhookPolicy. It is safe for concurrent use.
type WebhookGuard struct {
	allow      []netip.Prefix
	allowHosts map[string]bool
	lookup     func(ctx context.Context, host string) ([]netip.Addr, error)
	dial       func(ctx context.Context, network, addr string) (net.Conn, error)

	mu  sync.RWMutex
	own map[netip.AddrPort]bool
}

// NewWebhookGuard checks p and returns its guard.
func NewWebhookGuard(p WebhookPolicy) (*WebhookGuard, error) {
	g := &WebhookGuard{allowHosts: map[string]bool{}, own: map[netip.AddrPort]bool{}, lookup: p.Lookup, dial: p.Dial}
	for _, e := range p.Allow {
		pre, host, err := parseAllow(e)
		if err != nil {
			return nil, err
		}
		if host != "" {
			g.allowHosts[host] = true
		} else {
			g.allow = append(g.allow, pre)
		}
	}
	if g.lookup == nil {
		g.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if g.dial == nil {
		g.dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return g, nil
}

// DenyListener adds one of Berth's own listening addresses. A listener on
// an unspecified address (0.0.0.0, ::) is reachable at every address of
// the host, so its port is forbidden on all of them.
func (g *WebhookGuard) DenyListener(addr net.Addr) {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return
	}
	ips := []netip.Addr{ap.Addr().Unmap()}
	if ap.Addr().IsUnspecified() {
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(n.IP); ok {
						ips = append(ips, ip.Unmap())
					}
				}
			}
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, ip := range ips {
		g.own[netip.AddrPortFrom(ip, ap.Port())] = true
	}
}

// Check says whether a webhook to host (as written in the URL) may connect
// to ip:port, and if not, why.
func (g *WebhookGuard) Check(host string, ip netip.Addr, port uint16) error {
	ip = ip.Unmap()
	g.mu.RLock()
	own := g.own[netip.AddrPortFrom(ip, port)]
	g.mu.RUnlock()
	if own {
		return fmt.Errorf("%w: %s is Berth's own listener", ErrWebhookForbidden, netip.AddrPortFrom(ip, port))
	}
	if g.allowHosts[strings.ToLower(strings.TrimSuffix(host, "."))] {
		return nil
	}
	for _, p := range g.allow {
		if p.Contains(ip) {
			return nil
		}
	}
	check := []netip.Addr{ip}
	if nat64.Contains(ip) { // a NAT64 gateway would reach the embedded IPv4 address
		b := ip.As16()
		check = append(check, netip.AddrFrom4([4]byte(b[12:])))
	}
	for _, a := range check {
		for _, f := range forbidden {
			if f.prefix.Contains(a) {
				return fmt.Errorf("%w: %s is %s (open it with --webhook-allow)", ErrWebhookForbidden, ip, f.why)
			}
		}
	}
	return nil
}

// CheckURL refuses at submission what is sure to be refused at delivery: a
// webhook URL whose host is an address literal, or "localhost", that the
// policy forbids. Names are resolved only at delivery (where the check that
// matters is made), so they pass here.
func (g *WebhookGuard) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	host := u.Hostname()
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return fmt.Errorf("webhook port %q: %w", port, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		h := strings.ToLower(strings.TrimSuffix(host, "."))
		if h != "localhost" && !strings.HasSuffix(h, ".localhost") {
			return nil
		}
		ip = netip.MustParseAddr("127.0.0.1") // RFC 6761: always loopback
	}
	return g.Check(host, ip, uint16(p))
}

// DialContext resolves addr's host, drops the addresses the policy forbids
// and dials the first allowed one that answers. It dials the checked IP
// itself, never the name again, so a second resolution cannot differ.
func (g *WebhookGuard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("webhook port %q: %w", portStr, err)
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		ips = []netip.Addr{ip}
	} else if ips, err = g.lookup(ctx, host); err != nil {
		return nil, err
	}
	var errs []error
	for _, ip := range ips {
		if err := g.Check(host, ip, uint16(port)); err != nil {
			errs = append(errs, err)
			continue
		}
		c, err := g.dial(ctx, network, netip.AddrPortFrom(ip.Unmap(), uint16(port)).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("%s: no addresses", host)
	}
	return nil, errors.Join(errs...)
}

// maxRedirects bounds how many redirects one delivery follows.
const maxRedirects = 5

// Client returns an HTTP client whose every connection, redirects included,
// goes through DialContext, with no proxy (a proxy would make the forbidden
// connection on Berth's behalf).
func (g *WebhookGuard) Client(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           g.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          32,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: timeout,
		},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= maxRedirects {
				return fmt.Errorf("webhook: stopped after %d redirects", maxRedirects)
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return fmt.Errorf("webhook: redirect to a %q URL", req.URL.Scheme)
			}
			return nil
		},
	}
}
