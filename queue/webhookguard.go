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
// known cloud metadata addresses, none of the host's own addresses (every
// interface's: the Docker bridge's 172.17.0.1, the LAN address — a service
// listening on 0.0.0.0 is as reachable there as on loopback), and never
// Berth's own listeners. Other private addresses (10/8, 172.16/12,
// 192.168/16, fc00::/7, 100.64/10) and public addresses are allowed: a
// homelab's webhook receiver is usually on the LAN.
type WebhookPolicy struct {
	// Allow opens addresses the defaults forbid: CIDRs ("127.0.0.0/8"),
	// single addresses ("::1", "172.17.0.1") or host names ("receiver.lan",
	// matched against the URL's host as written, whatever it resolves
	// to). Berth's own listeners stay forbidden.
	Allow []string
	// HostAddrs lists the host's own addresses [every interface's, from
	// net.InterfaceAddrs, read again when older than hostAddrsTTL, so an
	// interface that comes up later (a new Docker network) is covered];
	// tests stub it.
	HostAddrs func() ([]netip.Addr, error)
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

// Reaches returns the addresses a connection to ip can reach, the ones the
// policy judges: ip itself without its zone (a zone only names the
// interface: "::1%lo" is ::1) and every IPv4 address an IPv6 transition
// or translation mechanism embeds in it, since a NAT64 gateway, a 6to4 or
// Teredo relay or an ISATAP tunnel on the path delivers the packet there.
// Operator-chosen prefixes (a network-specific NAT64 prefix, 6rd) cannot be
// known here; the well-known and special-purpose ones are:
//
//   - IPv4-mapped ::ffff:0:0/96 and IPv4-compatible ::/96 (RFC 4291; not
//     its first /104, which holds :: and ::1, judged as themselves),
//     SIIT's IPv4-translated ::ffff:0:0:0/96 (RFC 2765): the last 32 bits;
//   - NAT64 64:ff9b::/96 (RFC 6052): the last 32 bits;
//   - local-use NAT64 64:ff9b:1::/48 (RFC 8215): the operator picks a
//     prefix length of 48, 56, 64 or 96 within it, so the IPv4 address of
//     each of RFC 6052's layouts the address fits;
//   - 6to4 2002::/16 (RFC 3056): bits 16–47;
//   - Teredo 2001::/32 (RFC 4380): the server (bits 32–63) and the client,
//     stored inverted in the last 32 bits;
//   - ISATAP interface identifiers ::0:5efe:a.b.c.d and ::200:5efe:a.b.c.d
//     (RFC 5214, with the u/g bits either way) under any prefix.
func Reaches(ip netip.Addr) []netip.Addr {
	ip = ip.WithZone("").Unmap()
	out := []netip.Addr{ip}
	if !ip.Is6() {
		return out
	}
	b := ip.As16()
	v4 := func(i, j, k, l int) netip.Addr { return netip.AddrFrom4([4]byte{b[i], b[j], b[k], b[l]}) }
	zero := func(from, to int) bool {
		for _, x := range b[from:to] {
			if x != 0 {
				return false
			}
		}
		return true
	}
	switch {
	case zero(0, 12) && b[12] != 0: // IPv4-compatible (not ::/104, where :: and ::1 are)
		out = append(out, v4(12, 13, 14, 15))
	case zero(0, 8) && b[8] == 0xff && b[9] == 0xff && b[10] == 0 && b[11] == 0: // SIIT
		out = append(out, v4(12, 13, 14, 15))
	case nat64WellKnown.Contains(ip):
		out = append(out, v4(12, 13, 14, 15))
	case nat64Local.Contains(ip):
		// RFC 6052's layouts for a prefix of 48, 56 or 64 bits skip the
		// reserved octet 8, which must be zero, and leave the rest zero;
		// the /96 layout has the address in the last 32 bits.
		if b[8] == 0 {
			if zero(11, 16) {
				out = append(out, v4(6, 7, 9, 10))
			}
			if zero(12, 16) {
				out = append(out, v4(7, 9, 10, 11))
			}
			if zero(13, 16) {
				out = append(out, v4(9, 10, 11, 12))
			}
		}
		out = append(out, v4(12, 13, 14, 15))
	case sixToFour.Contains(ip):
		out = append(out, v4(2, 3, 4, 5))
	case teredo.Contains(ip):
		out = append(out, v4(4, 5, 6, 7), netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}))
	}
	if b[8]&^0x03 == 0 && b[9] == 0 && b[10] == 0x5e && b[11] == 0xfe { // ISATAP
		out = append(out, v4(12, 13, 14, 15))
	}
	return out
}

var (
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local     = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour      = netip.MustParsePrefix("2002::/16")
	teredo         = netip.MustParsePrefix("2001::/32")
)

// WebhookGuard enforces a WebhookPolicy. It is safe for concurrent use.
type WebhookGuard struct {
	allow      []netip.Prefix
	allowHosts map[string]bool
	lookup     func(ctx context.Context, host string) ([]netip.Addr, error)
	dial       func(ctx context.Context, network, addr string) (net.Conn, error)

	mu  sync.RWMutex
	own map[netip.AddrPort]bool

	hostAddrs func() ([]netip.Addr, error)
	hostMu    sync.Mutex
	host      map[netip.Addr]bool // the host's addresses, as last read
	hostRead  time.Time
}

// hostAddrsTTL is how long the host's addresses are used before they are
// read again (net.InterfaceAddrs costs a netlink dump).
const hostAddrsTTL = time.Second

// InterfaceAddrs is every address of the host's interfaces, without zones.
func InterfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.WithZone("").Unmap())
			}
		}
	}
	return out, nil
}

// isHostAddr reports whether a is one of the host's own addresses. When
// they cannot be read, the last list read stays in use.
func (g *WebhookGuard) isHostAddr(a netip.Addr) bool {
	g.hostMu.Lock()
	defer g.hostMu.Unlock()
	if now := time.Now(); g.host == nil || now.Sub(g.hostRead) > hostAddrsTTL {
		if addrs, err := g.hostAddrs(); err == nil || g.host == nil {
			g.host = make(map[netip.Addr]bool, len(addrs))
			for _, h := range addrs {
				g.host[h.WithZone("").Unmap()] = true
			}
		}
		g.hostRead = now
	}
	return g.host[a]
}

// NewWebhookGuard checks p and returns its guard.
func NewWebhookGuard(p WebhookPolicy) (*WebhookGuard, error) {
	g := &WebhookGuard{allowHosts: map[string]bool{}, own: map[netip.AddrPort]bool{}, lookup: p.Lookup, dial: p.Dial, hostAddrs: p.HostAddrs}
	if g.hostAddrs == nil {
		g.hostAddrs = InterfaceAddrs
	}
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
	ips := []netip.Addr{ap.Addr().WithZone("").Unmap()}
	if ap.Addr().IsUnspecified() {
		if addrs, err := g.hostAddrs(); err == nil {
			for _, a := range addrs {
				ips = append(ips, a.WithZone("").Unmap())
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
// to ip:port, and if not, why. ip is judged by every address it reaches
// (Reaches): its zone is ignored and an embedded IPv4 address must pass as
// well, so no spelling of a forbidden address gets through.
func (g *WebhookGuard) Check(host string, ip netip.Addr, port uint16) error {
	reach := Reaches(ip)
	g.mu.RLock()
	for _, a := range reach {
		if g.own[netip.AddrPortFrom(a, port)] {
			g.mu.RUnlock()
			return fmt.Errorf("%w: %s is Berth's own listener", ErrWebhookForbidden, netip.AddrPortFrom(a, port))
		}
	}
	g.mu.RUnlock()
	if g.allowHosts[strings.ToLower(strings.TrimSuffix(host, "."))] {
		return nil
	}
	for _, a := range reach {
		if err := g.judge(a); err != nil {
			if a != reach[0] {
				return fmt.Errorf("%w: %s reaches %s, which is %s (open it with --webhook-allow)", ErrWebhookForbidden, ip, a, err)
			}
			return fmt.Errorf("%w: %s is %s (open it with --webhook-allow)", ErrWebhookForbidden, ip, err)
		}
	}
	return nil
}

// judge returns why the default policy forbids the plain address a, or nil
// when it does not or the policy's Allow opens it.
func (g *WebhookGuard) judge(a netip.Addr) error {
	for _, p := range g.allow {
		if p.Contains(a) {
			return nil
		}
	}
	for _, f := range forbidden {
		if f.prefix.Contains(a) {
			return errors.New(f.why)
		}
	}
	if g.isHostAddr(a) {
		return errors.New("this host's own address")
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
		c, err := g.dial(ctx, network, netip.AddrPortFrom(dialAddr(ip), uint16(port)).String())
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

// dialAddr is the address dialled for ip, which Check allowed: without its
// zone, except a link-local address, which needs one to say where it is.
func dialAddr(ip netip.Addr) netip.Addr {
	ip = ip.Unmap()
	if ip.Is6() && (ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast()) {
		return ip
	}
	return ip.WithZone("")
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
