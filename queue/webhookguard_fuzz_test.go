package queue_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"berth/queue"
)

// Berth's own listeners in the fuzz target: loopback and a LAN address, as
// `--addr 0.0.0.0:8080` gives.
var fuzzOwn = []string{"127.0.0.1:8080", "[::1]:8080", "192.168.1.10:8080"}

// The host's own addresses in the fuzz target: loopback, the LAN address,
// the Docker bridge and a ULA.
var fuzzHost = []string{"127.0.0.1", "::1", "192.168.1.10", "172.17.0.1", "fd12:3456::10"}

func fuzzHostAddrs() ([]netip.Addr, error) {
	var out []netip.Addr
	for _, h := range fuzzHost {
		out = append(out, netip.MustParseAddr(h))
	}
	return out, nil
}

// FuzzWebhookPolicy: whatever the webhook URL, the chain of redirects its
// receivers answer and the addresses its names resolve to, the webhook
// client never dials a forbidden address — judged by an oracle written
// apart from the guard (stdlib net.IP predicates and its own table of the
// embedding prefixes) — and never Berth's own listener, even with loopback
// opened; and it dials only address literals, never a name.
//
// hops is the receivers' redirect chain (one Location per line); answers
// are the DNS answers for any name (comma-separated; an address that does
// not parse is left out).
func FuzzWebhookPolicy(f *testing.F) {
	for _, seed := range [][3]string{
		{"http://hooks.example/x", "", "203.0.113.7"},
		{"http://[::1%25lo]:8080/v2/x/run", "", ""},
		{"http://hooks.example/x", "http://[::1%25lo]:8080/", "203.0.113.7"},
		{"http://hooks.example/x", "http://[::ffff:127.0.0.1%25eth0]/\nhttp://x/", "203.0.113.7"},
		{"http://[64:ff9b:1::a9fe:a9fe]/", "", ""},
		{"http://[64:ff9b::127.0.0.1]:8080/", "", ""},
		{"http://[2002:7f00:1::]/", "", ""},
		{"http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", "", ""},
		{"http://[2001:db8::5efe:a9fe:a9fe]/", "", ""},
		{"http://[::ffff:0:7f00:1]/", "", ""},
		{"http://[::a9fe:a9fe]/", "", ""},
		{"http://[fe80::1%25eth0]/", "", ""},
		{"http://rebind.example/", "http://rebind.example/2\nhttp://rebind.example/3", "10.0.0.5,127.0.0.1,::1%lo"},
		{"http://lan.example:8080/", "http://192.168.1.10:8080/", "192.168.1.20"},
		{"https://hooks.example/", "/relative\n//169.254.169.254/x\nhttp://0x7f.1/", "100.100.100.200,fd00:ec2::254"},
		{"http://2130706433/", "http://017700000001/", "127.0.0.1"},
		{"http://[::]:8080/", "", "0.0.0.0"},
		{"http://[ff02::1%25lo]/", "", ""},
		{"http://hooks.example/", "http://[::1%25lo]:8080\nhttp://[::1%25lo]:8080", "64:ff9b::7f00:1,2002:c000:207::"},
		{"http://172.17.0.1:2375/", "", ""},
		{"http://hooks.example/", "http://[::ffff:172.17.0.1]:9000/\nhttp://[64:ff9b::c0a8:10a]/", "192.168.1.10,fd12:3456::10"},
		{"http://[fd12:3456::10%25eth0]:22/", "", ""},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, rawURL, hops, answers string) {
		if len(rawURL) > 2000 || len(hops) > 4000 || len(answers) > 1000 {
			return
		}
		var dns []netip.Addr
		for _, a := range strings.Split(answers, ",") {
			if ip, err := netip.ParseAddr(strings.TrimSpace(a)); err == nil {
				dns = append(dns, ip)
			}
		}
		if len(dns) == 0 {
			dns = []netip.Addr{netip.MustParseAddr("203.0.113.9")}
		}
		chain := strings.Split(hops, "\n")
		if hops == "" {
			chain = nil
		}
		for _, allowLoopback := range []bool{false, true} {
			var allow []string
			if allowLoopback {
				allow = []string{"127.0.0.0/8", "::1"}
			}
			var next atomic.Int32 // the next hop of the chain to answer
			var wg sync.WaitGroup
			g, err := queue.NewWebhookGuard(queue.WebhookPolicy{
				Allow:     allow,
				HostAddrs: fuzzHostAddrs,
				Lookup:    func(context.Context, string) ([]netip.Addr, error) { return dns, nil },
				Dial: func(_ context.Context, _, addr string) (net.Conn, error) {
					if why := oracleForbidden(addr, allowLoopback); why != "" {
						// Errorf, not Fatalf: this is the transport's goroutine.
						t.Errorf("url %q, hops %q, answers %q, loopback open=%v: dialled %s, which is %s", rawURL, hops, answers, allowLoopback, addr, why)
						return nil, errors.New("forbidden dial")
					}
					client, server := net.Pipe()
					wg.Add(1)
					go func() { defer wg.Done(); serveChain(server, chain, &next) }()
					return client, nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, own := range fuzzOwn {
				g.DenyListener(net.TCPAddrFromAddrPort(netip.MustParseAddrPort(own)))
			}
			_ = g.CheckURL(rawURL)
			c := g.Client(2 * time.Second)
			if req, err := http.NewRequest(http.MethodPost, rawURL, strings.NewReader(`{"id":"x"}`)); err == nil {
				if res, err := c.Do(req); err == nil {
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
			}
			c.CloseIdleConnections()
			wg.Wait()
		}
	})
}

// serveChain answers the requests on one connection: each redirects to
// the next hop of the chain while there is one, then 200.
func serveChain(conn net.Conn, chain []string, next *atomic.Int32) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		i := int(next.Add(1)) - 1
		var res string
		if i < len(chain) {
			loc := strings.Map(func(r rune) rune {
				if r == '\r' || r == '\n' {
					return -1
				}
				return r
			}, chain[i])
			res = "HTTP/1.1 302 Found\r\nLocation: " + loc + "\r\nContent-Length: 0\r\n\r\n"
		} else {
			res = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
		}
		if _, err := io.WriteString(conn, res); err != nil {
			return
		}
	}
}

// oracleForbidden says why the default policy (with loopback opened when
// allowLoopback) must never dial addr ("ip:port"), or "". It is the policy
// written again with the standard library's net.IP predicates and its own
// table of the prefixes that embed an IPv4 address, so that a mistake in
// queue.Reaches or in the guard's table does not hide itself.
func oracleForbidden(addr string, allowLoopback bool) string {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "not ip:port"
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return "a bad port"
	}
	zone := ""
	if i := strings.IndexByte(host, '%'); i >= 0 {
		host, zone = host[:i], host[i+1:]
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return "not an address literal (a name dialled after its check could resolve differently)"
	}
	if zone != "" && !ip.IsLinkLocalUnicast() && !ip.IsLinkLocalMulticast() {
		return "zoned"
	}
	for _, a := range oracleReach(ip) {
		for _, own := range fuzzOwn {
			h, p, _ := net.SplitHostPort(own)
			if net.ParseIP(h).Equal(a) && p == strconv.Itoa(port) {
				return "Berth's own listener (as " + a.String() + ")"
			}
		}
		switch {
		case a.IsLoopback():
			if !allowLoopback {
				return "loopback (as " + a.String() + ")"
			}
		case a.IsUnspecified(), a.To4() != nil && a.To4()[0] == 0:
			return "unspecified (as " + a.String() + ")"
		case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast(), a.IsInterfaceLocalMulticast(), a.IsMulticast():
			return "link-local or multicast (as " + a.String() + ")"
		case a.Equal(net.IPv4bcast):
			return "broadcast"
		case a.Equal(net.ParseIP("100.100.100.200")), a.Equal(net.ParseIP("fd00:ec2::254")):
			return "a metadata service"
		}
		for _, h := range fuzzHost {
			if ip := net.ParseIP(h); ip.Equal(a) && !ip.IsLoopback() {
				return "the host's own address (as " + a.String() + ")"
			}
		}
	}
	return ""
}

// oracleReach lists ip and the IPv4 addresses embedded in it by the
// prefixes of RFC 4291 (mapped, compatible), RFC 2765 (SIIT), RFC 6052 and
// RFC 8215 (NAT64), RFC 3056 (6to4), RFC 4380 (Teredo) and RFC 5214
// (ISATAP).
func oracleReach(ip net.IP) []net.IP {
	out := []net.IP{ip}
	v6 := ip.To16()
	if ip.To4() != nil || v6 == nil {
		return out
	}
	pick := func(idx ...int) net.IP {
		b := make(net.IP, 4)
		for i, j := range idx {
			b[i] = v6[j]
		}
		return b
	}
	has := func(prefix string) bool {
		_, n, _ := net.ParseCIDR(prefix)
		return n.Contains(ip)
	}
	allZero := func(from, to int) bool { return strings.Trim(string(v6[from:to]), "\x00") == "" }
	type layout struct {
		prefix string
		idx    []int
		when   bool
	}
	for _, l := range []layout{
		{"::/96", []int{12, 13, 14, 15}, v6[12] != 0},
		{"::ffff:0:0:0/96", []int{12, 13, 14, 15}, true},
		{"64:ff9b::/96", []int{12, 13, 14, 15}, true},
		{"64:ff9b:1::/48", []int{6, 7, 9, 10}, v6[8] == 0 && allZero(11, 16)},
		{"64:ff9b:1::/48", []int{7, 9, 10, 11}, v6[8] == 0 && allZero(12, 16)},
		{"64:ff9b:1::/48", []int{9, 10, 11, 12}, v6[8] == 0 && allZero(13, 16)},
		{"64:ff9b:1::/48", []int{12, 13, 14, 15}, true},
		{"2002::/16", []int{2, 3, 4, 5}, true},
		{"2001::/32", []int{4, 5, 6, 7}, true},
	} {
		if l.when && has(l.prefix) {
			out = append(out, pick(l.idx...))
		}
	}
	if has("2001::/32") {
		c := pick(12, 13, 14, 15)
		for i := range c {
			c[i] ^= 0xff
		}
		out = append(out, c)
	}
	if (v6[8] == 0 || v6[8] == 1 || v6[8] == 2 || v6[8] == 3) && v6[9] == 0 && v6[10] == 0x5e && v6[11] == 0xfe {
		out = append(out, pick(12, 13, 14, 15))
	}
	return out
}

// TestFuzzWebhookOracle: the oracle itself refuses what it must (so a
// passing fuzz run means something).
func TestFuzzWebhookOracle(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:80": true, "[::1%lo]:80": true, "[64:ff9b:1::7f00:1]:80": true, "[2002:a9fe:a9fe::]:80": true,
		"[2001:0:4136:e378:8000:63bf:80ff:fffe]:80": true, "[2001:db8::200:5efe:7f00:1]:80": true, "192.168.1.10:8080": true,
		"hooks.example:80": true, "[fe80::1%eth0]:80": true, "100.100.100.200:80": true,
		"192.168.1.10:80": true, "172.17.0.1:2375": true, "[::ffff:172.17.0.1]:80": true, "[fd12:3456::10]:80": true,
		"203.0.113.7:443": false, "192.168.1.20:80": false, "172.17.0.2:80": false, "[2001:db8::1]:80": false, "[64:ff9b::c000:207]:80": false,
	} {
		if got := oracleForbidden(addr, false) != ""; got != want {
			t.Errorf("oracle(%s) forbidden=%v, want %v", addr, got, want)
		}
	}
	if why := oracleForbidden("[::1]:8080", true); !strings.Contains(why, "own listener") {
		t.Errorf("oracle([::1]:8080, loopback open) = %q, want Berth's own listener", why)
	}
	if why := oracleForbidden("[::1]:9000", true); why != "" {
		t.Errorf("oracle([::1]:9000, loopback open) = %q, want allowed", why)
	}
}
