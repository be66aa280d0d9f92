package queue_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"berth/queue"
)

// loopbackHooks is a webhook client for tests whose receivers are httptest
// servers on 127.0.0.1, which the default policy forbids.
func loopbackHooks(t *testing.T) *http.Client {
	g, err := queue.NewWebhookGuard(queue.WebhookPolicy{Allow: []string{"127.0.0.0/8", "::1"}})
	if err != nil {
		t.Fatal(err)
	}
	return g.Client(10 * time.Second)
}

func TestWebhookPolicyDecisions(t *testing.T) {
	ip := netip.MustParseAddr
	for _, tc := range []struct {
		allow []string
		host  string
		ip    string
		port  uint16
		why   string // "" = allowed
	}{
		{nil, "hooks.example.com", "203.0.113.7", 443, ""},
		{nil, "nas.lan", "192.168.1.20", 80, ""},
		{nil, "10.1.2.3", "10.1.2.3", 8000, ""},
		{nil, "pi", "172.16.0.9", 80, ""},
		{nil, "ula", "fd12:3456::1", 80, ""},
		{nil, "tailnet", "100.101.102.103", 80, ""},
		{nil, "localhost", "127.0.0.1", 80, "loopback"},
		{nil, "x", "127.8.9.10", 80, "loopback"},
		{nil, "x", "::1", 80, "loopback"},
		{nil, "x", "::ffff:127.0.0.1", 80, "loopback"},
		{nil, "x", "169.254.169.254", 80, "metadata"},
		{nil, "x", "169.254.10.1", 80, "link-local"},
		{nil, "x", "fe80::1", 80, "link-local"},
		{nil, "x", "fd00:ec2::254", 80, "metadata"},
		{nil, "x", "64:ff9b::a9fe:a9fe", 80, "metadata"}, // NAT64 of 169.254.169.254
		// Zones name an interface; the address is what it is.
		{nil, "x", "::1%lo", 80, "loopback"},
		{nil, "x", "::1%1", 80, "loopback"},
		{nil, "x", "::ffff:127.0.0.1%lo", 80, "loopback"},
		{nil, "x", "fe80::1%eth0", 80, "link-local"},
		{nil, "x", "::%lo", 80, "unspecified"},
		{nil, "x", "ff02::1%eth0", 80, "multicast"},
		{[]string{"::1"}, "x", "::1%lo", 80, ""},
		// Every translation or tunnelling prefix is judged by the IPv4
		// address it reaches.
		{nil, "x", "64:ff9b::7f00:1", 80, "loopback"},
		{nil, "x", "64:ff9b:1::7f00:1", 80, "loopback"},                    // RFC 8215, /96 layout
		{nil, "x", "64:ff9b:1:7f00:0:100::", 80, "loopback"},               // RFC 8215, /48 layout (127.0.0.1, u octet skipped)
		{nil, "x", "64:ff9b:1:a9:fe:a9fe::", 80, "metadata"},               // RFC 8215, /56 layout of 169.254.169.254
		{nil, "x", "64:ff9b:1:0:a9:fea9:fe00:0", 80, "metadata"},           // RFC 8215, /64 layout
		{nil, "x", "::ffff:0:7f00:1", 80, "loopback"},                      // SIIT IPv4-translated
		{nil, "x", "::7f00:1", 80, "loopback"},                             // IPv4-compatible
		{nil, "x", "::a9fe:a9fe", 80, "metadata"},                          // IPv4-compatible
		{nil, "x", "2002:7f00:1::1", 80, "loopback"},                       // 6to4
		{nil, "x", "2002:a9fe:a9fe::", 80, "metadata"},                     // 6to4
		{nil, "x", "2001:0:4136:e378:8000:63bf:80ff:fffe", 80, "loopback"}, // Teredo, client 127.0.0.1 inverted
		{nil, "x", "2001:0:a9fe:a9fe::1", 80, "metadata"},                  // Teredo server
		{nil, "x", "2001:db8::5efe:7f00:1", 80, "loopback"},                // ISATAP
		{nil, "x", "2001:db8::200:5efe:a9fe:a9fe", 80, "metadata"},         // ISATAP, universal bit set
		{nil, "x", "64:ff9b::c000:207", 80, ""},                            // NAT64 of a public address
		{nil, "x", "2002:cb00:7107::1", 80, ""},                            // 6to4 of 203.0.113.7
		{nil, "x", "2001:db8::1", 80, ""},
		{[]string{"127.0.0.0/8"}, "x", "64:ff9b::7f00:1", 80, ""},
		{nil, "x", "0.0.0.0", 80, "unspecified"},
		{nil, "x", "::", 80, "unspecified"},
		{nil, "x", "224.0.0.1", 80, "multicast"},
		{nil, "x", "255.255.255.255", 80, "broadcast"},
		{[]string{"127.0.0.0/8"}, "x", "127.0.0.1", 80, ""},
		{[]string{"127.0.0.0/8"}, "x", "::1", 80, "loopback"},
		{[]string{"::1"}, "x", "::1", 80, ""},
		{[]string{"169.254.7.0/24"}, "x", "169.254.7.7", 80, ""},
		{[]string{"169.254.7.0/24"}, "x", "169.254.169.254", 80, "metadata"},
		{[]string{"hooks.local"}, "Hooks.Local.", "127.0.0.1", 80, ""},
		{[]string{"hooks.local"}, "other.local", "127.0.0.1", 80, "loopback"},
		// The host's own addresses (testHostAddrs) are as good as
		// loopback: every service listening on 0.0.0.0 answers there.
		{nil, "docker", "172.17.0.1", 2375, "this host's own address"},
		{nil, "lan", "192.168.1.10", 8080, "this host's own address"},
		{nil, "x", "::ffff:172.17.0.1", 80, "this host's own address"},
		{nil, "x", "64:ff9b::ac11:1", 80, "this host's own address"}, // NAT64 of 172.17.0.1
		{nil, "x", "2002:c0a8:10a::", 80, "this host's own address"}, // 6to4 of 192.168.1.10
		{nil, "x", "fd12:3456::10%eth0", 22, "this host's own address"},
		{nil, "x", "172.17.0.2", 80, ""}, // a container on the bridge is not the host
		{[]string{"172.17.0.1"}, "x", "172.17.0.1", 2375, ""},
		{[]string{"192.168.1.0/24"}, "x", "192.168.1.10", 80, ""},
		{[]string{"hooks.lan"}, "hooks.lan", "192.168.1.10", 80, ""},
		{[]string{"127.0.0.0/8", "::1"}, "x", "172.17.0.1", 80, "this host's own address"},
	} {
		t.Run(fmt.Sprintf("%v %s %s", tc.allow, tc.host, tc.ip), func(t *testing.T) {
			g, err := queue.NewWebhookGuard(queue.WebhookPolicy{Allow: tc.allow, HostAddrs: testHostAddrs})
			if err != nil {
				t.Fatal(err)
			}
			err = g.Check(tc.host, ip(tc.ip), tc.port)
			if tc.why == "" && err != nil {
				t.Fatalf("forbidden: %v", err)
			}
			if tc.why != "" && (!errors.Is(err, queue.ErrWebhookForbidden) || !strings.Contains(err.Error(), tc.why)) {
				t.Fatalf("got %v, want forbidden as %s", err, tc.why)
			}
		})
	}
}

func TestParseWebhookAllow(t *testing.T) {
	got, err := queue.ParseWebhookAllow(" 127.0.0.0/8, ::1 ,hooks.lan,,")
	if err != nil || strings.Join(got, "|") != "127.0.0.0/8|::1|hooks.lan" {
		t.Fatalf("got %q, %v", got, err)
	}
	for _, bad := range []string{"10.0.0.0/33", "http://x/", "a b", "host:80"} {
		if _, err := queue.ParseWebhookAllow(bad); err == nil || !strings.Contains(err.Error(), "--webhook-allow") {
			t.Errorf("%q: got %v, want an error naming --webhook-allow", bad, err)
		}
	}
}

// net is a fake network for the guard: names resolve through a table that
// can change between lookups (DNS rebinding), and only addresses in the
// testHostAddrs are a host's addresses: loopback, the LAN, the Docker
// bridge and a ULA (none of them this machine's, none ever dialled).
func testHostAddrs() ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range []string{"127.0.0.1", "::1", "192.168.1.10", "172.17.0.1", "fd12:3456::10"} {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

// A name resolving to the host's own address is refused before any
// connection is made, even when its resolution changes to it between a
// first allowed delivery and the next; --webhook-allow naming the address
// lets it through.
func TestWebhookToTheHostsOwnAddressNeverDialled(t *testing.T) {
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer recv.Close()
	for _, tc := range []struct {
		allow []string
		dials string // the dials made, in order
	}{
		{nil, "192.168.1.20:80"},
		{[]string{"172.17.0.1"}, "192.168.1.20:80,172.17.0.1:80"},
	} {
		n := &fakeNet{
			names:  map[string][]string{"hooks.lan": {"192.168.1.20", "172.17.0.1"}},
			routes: map[string]string{"192.168.1.20:80": hostPort(t, recv), "172.17.0.1:80": hostPort(t, recv)},
		}
		p := n.policy(tc.allow...)
		p.HostAddrs = testHostAddrs
		g, err := queue.NewWebhookGuard(p)
		if err != nil {
			t.Fatal(err)
		}
		c := g.Client(5 * time.Second)
		for i, wantErr := range []bool{false, tc.allow == nil} {
			res, err := c.Post("http://hooks.lan/hook", "application/json", strings.NewReader(`{}`))
			if err == nil {
				res.Body.Close()
			}
			if (err != nil) != wantErr || (wantErr && (!errors.Is(err, queue.ErrWebhookForbidden) || !strings.Contains(err.Error(), "this host's own address"))) {
				t.Errorf("allow %v, delivery %d: %v, want refused=%v as the host's own address", tc.allow, i, err, wantErr)
			}
			c.CloseIdleConnections()
		}
		if d := strings.Join(n.dials(), ","); d != tc.dials {
			t.Errorf("allow %v: dialled %q, want %q", tc.allow, d, tc.dials)
		}
	}
}

// routes table connect (to a real httptest server); every dial is recorded.
type fakeNet struct {
	mu     sync.Mutex
	names  map[string][]string // host -> addresses, one entry per lookup; the last repeats
	routes map[string]string   // "ip:port" -> real "127.0.0.1:port"
	dialed []string
}

func (n *fakeNet) policy(allow ...string) queue.WebhookPolicy {
	return queue.WebhookPolicy{
		Allow:     allow,
		HostAddrs: func() ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil },
		Lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
			n.mu.Lock()
			defer n.mu.Unlock()
			seq := n.names[host]
			if len(seq) == 0 {
				return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
			}
			a := seq[0]
			if len(seq) > 1 {
				n.names[host] = seq[1:]
			}
			return []netip.Addr{netip.MustParseAddr(a)}, nil
		},
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			n.mu.Lock()
			n.dialed = append(n.dialed, addr)
			real, ok := n.routes[addr]
			n.mu.Unlock()
			if !ok {
				return nil, fmt.Errorf("test network: %s unreachable", addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, real)
		},
	}
}

func (n *fakeNet) dials() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.dialed...)
}

func hostPort(t *testing.T, srv *httptest.Server) string {
	return strings.TrimPrefix(srv.URL, "http://")
}

func post(c *http.Client, url string) (*http.Response, error) {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"id":"x"}`))
	req.Close = true // a new connection (and so a new dial) for every request
	resp, err := c.Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

// TestWebhookDNSRebindingDialsOnlyCheckedAddresses: a name that resolves to
// a LAN address first and to loopback next is delivered to the first and
// refused the second time; the loopback address is never dialled.
func TestWebhookDNSRebindingDialsOnlyCheckedAddresses(t *testing.T) {
	hits := make(chan string, 4)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits <- r.Host }))
	defer recv.Close()
	n := &fakeNet{
		names:  map[string][]string{"hooks.example": {"10.0.0.5", "127.0.0.1"}},
		routes: map[string]string{"10.0.0.5:80": hostPort(t, recv), "127.0.0.1:80": hostPort(t, recv)},
	}
	g, err := queue.NewWebhookGuard(n.policy())
	if err != nil {
		t.Fatal(err)
	}
	c := g.Client(10 * time.Second)
	if resp, err := post(c, "http://hooks.example/hook"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first delivery: %v %v", resp, err)
	}
	if h := <-hits; h != "hooks.example" {
		t.Fatalf("Host header %q, want the name as written", h)
	}
	_, err = post(c, "http://hooks.example/hook")
	if !errors.Is(err, queue.ErrWebhookForbidden) || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("after rebinding to loopback: got %v, want forbidden", err)
	}
	if d := n.dials(); strings.Join(d, ",") != "10.0.0.5:80" {
		t.Fatalf("dialled %v, want only the checked LAN address", d)
	}
	if len(hits) != 0 {
		t.Fatal("the receiver was reached after rebinding")
	}
}

// TestWebhookRedirects: a receiver that redirects to the metadata service or
// to a loopback service is not followed there; a redirect to another
// allowed address is.
func TestWebhookRedirects(t *testing.T) {
	internal := make(chan string, 4)
	inside := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { internal <- r.URL.Path }))
	defer inside.Close()
	delivered := make(chan string, 4)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/to-metadata":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusTemporaryRedirect)
		case "/to-loopback":
			http.Redirect(w, r, "http://admin.internal/secret", http.StatusTemporaryRedirect)
		case "/to-lan":
			http.Redirect(w, r, "http://other.lan/final", http.StatusTemporaryRedirect)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusTemporaryRedirect)
		default:
			delivered <- r.URL.Path
		}
	}))
	defer recv.Close()
	n := &fakeNet{
		names: map[string][]string{"hooks.example": {"10.0.0.5"}, "other.lan": {"192.168.7.7"}, "admin.internal": {"127.0.0.1"}},
		routes: map[string]string{
			"10.0.0.5:80": hostPort(t, recv), "192.168.7.7:80": hostPort(t, recv),
			"169.254.169.254:80": hostPort(t, inside), "127.0.0.1:80": hostPort(t, inside),
		},
	}
	g, err := queue.NewWebhookGuard(n.policy())
	if err != nil {
		t.Fatal(err)
	}
	c := g.Client(10 * time.Second)
	for _, path := range []string{"/to-metadata", "/to-loopback"} {
		if _, err := post(c, "http://hooks.example"+path); !errors.Is(err, queue.ErrWebhookForbidden) {
			t.Errorf("%s: got %v, want forbidden", path, err)
		}
	}
	if _, err := post(c, "http://hooks.example/loop"); err == nil || !strings.Contains(err.Error(), "redirects") {
		t.Errorf("redirect loop: got %v", err)
	}
	if resp, err := post(c, "http://hooks.example/to-lan"); err != nil || resp.StatusCode != 200 || <-delivered != "/final" {
		t.Fatalf("redirect to the LAN: %v %v", resp, err)
	}
	for _, d := range n.dials() {
		if strings.HasPrefix(d, "169.254.") || strings.HasPrefix(d, "127.") {
			t.Errorf("dialled %s", d)
		}
	}
	if len(internal) != 0 {
		t.Errorf("an internal service was reached: %s", <-internal)
	}
}

// TestWebhookNeverReachesBerthItself: even with loopback opened, Berth's own
// listener stays forbidden.
func TestWebhookNeverReachesBerthItself(t *testing.T) {
	own := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("Berth's listener was reached") }))
	defer own.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer other.Close()
	g, err := queue.NewWebhookGuard(queue.WebhookPolicy{Allow: []string{"127.0.0.0/8"}})
	if err != nil {
		t.Fatal(err)
	}
	g.DenyListener(own.Listener.Addr())
	c := g.Client(10 * time.Second)
	if _, err := post(c, own.URL+"/v2/x/run"); !errors.Is(err, queue.ErrWebhookForbidden) || !strings.Contains(err.Error(), "own listener") {
		t.Fatalf("got %v, want forbidden as Berth's own listener", err)
	}
	if resp, err := post(c, other.URL); err != nil || resp.StatusCode != 200 {
		t.Fatalf("another loopback port with loopback allowed: %v %v", resp, err)
	}
}

// TestWebhookZonedAddressesNeverReachBerth: an IPv6 zone ("[::1%25lo]")
// or an IPv4-mapped spelling, given directly or as a redirect's target, is
// judged as the address it is: loopback under the default policy, and
// Berth's own listener even with loopback opened.
func TestWebhookZonedAddressesNeverReachBerth(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	own := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("Berth's listener was reached") }))
	own.Listener = ln
	own.Start()
	defer own.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	zoned := fmt.Sprintf("http://[::1%%25lo]:%d/v2/x/run", port)
	redirector := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, zoned, http.StatusTemporaryRedirect)
	}))
	rln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	redirector.Listener = rln
	redirector.Start()
	defer redirector.Close()

	def, err := queue.NewWebhookGuard(queue.WebhookPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	def.DenyListener(ln.Addr())
	if _, err := post(def.Client(10*time.Second), zoned); !errors.Is(err, queue.ErrWebhookForbidden) {
		t.Errorf("default policy, %s: got %v, want forbidden", zoned, err)
	}
	if err := def.CheckURL(zoned); !errors.Is(err, queue.ErrWebhookForbidden) {
		t.Errorf("default policy, submission of %s: got %v, want forbidden", zoned, err)
	}

	open, err := queue.NewWebhookGuard(queue.WebhookPolicy{Allow: []string{"::1", "127.0.0.0/8"}})
	if err != nil {
		t.Fatal(err)
	}
	open.DenyListener(ln.Addr())
	c := open.Client(10 * time.Second)
	for _, u := range []string{zoned, fmt.Sprintf("http://[::1%%25eth0]:%d/", port), redirector.URL + "/hook"} {
		if _, err := post(c, u); !errors.Is(err, queue.ErrWebhookForbidden) || !strings.Contains(err.Error(), "own listener") {
			t.Errorf("loopback open, %s: got %v, want forbidden as Berth's own listener", u, err)
		}
	}
	if err := open.CheckURL(zoned); !errors.Is(err, queue.ErrWebhookForbidden) {
		t.Errorf("loopback open, submission of %s: got %v, want forbidden", zoned, err)
	}
}

// logSink is a slog handler that hands records to the test.
type logSink struct{ ch chan slog.Record }

func (s logSink) Enabled(context.Context, slog.Level) bool      { return true }
func (s logSink) Handle(_ context.Context, r slog.Record) error { s.ch <- r; return nil }
func (s logSink) WithAttrs([]slog.Attr) slog.Handler            { return s }
func (s logSink) WithGroup(string) slog.Handler                 { return s }

// TestServiceAppliesTheDefaultPolicy: a queue.Service with no client
// configured refuses a webhook to loopback and says why in its log.
func TestServiceAppliesTheDefaultPolicy(t *testing.T) {
	recv := newHookRecv(t)
	sink := logSink{make(chan slog.Record, 100)}
	h := newHarness(t, queue.Config{Logger: slog.New(sink)})
	id := h.submit(`{}`, func(r *queue.SubmitRequest) { r.Webhook = recv.srv.URL })
	h.take("w1")
	h.q.Done(ep, "w1", id, done(`{"output":1}`))
	deadline := time.After(30 * time.Second)
	for {
		select {
		case r := <-sink.ch:
			if !strings.HasPrefix(r.Message, "webhook") {
				continue
			}
			var msg string
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "err" {
					msg = a.Value.String()
				}
				return true
			})
			if !strings.Contains(msg, "not allowed") || !strings.Contains(msg, "loopback") {
				t.Fatalf("%s: err=%q, want the policy's refusal", r.Message, msg)
			}
			select {
			case c := <-recv.calls:
				t.Fatalf("the loopback receiver was called: %s", c)
			default:
			}
			return
		case <-deadline:
			t.Fatal("no webhook attempt logged")
		}
	}
}

// TestWebhookCheckURL: what is sure to be refused at delivery is refused at
// submission; names are left to the delivery-time check.
func TestWebhookCheckURL(t *testing.T) {
	for _, tc := range []struct {
		allow []string
		url   string
		why   string
	}{
		{nil, "http://127.0.0.1:9/x", "loopback"},
		{nil, "http://[::1]/", "loopback"},
		{nil, "http://[::ffff:127.0.0.1]:80/", "loopback"},
		{nil, "http://localhost:8080/hook", "loopback"},
		{nil, "http://app.LOCALHOST./hook", "loopback"},
		{nil, "http://169.254.169.254/latest/meta-data/", "metadata"},
		{nil, "https://[fe80::1]/", "link-local"},
		{nil, "http://0.0.0.0:8080/", "unspecified"},
		{nil, "https://hooks.example.com/x", ""},
		{nil, "http://10.0.0.5:8000/x", ""},
		{nil, "http://nas.lan/x", ""},
		{[]string{"127.0.0.0/8"}, "http://localhost/x", ""},
		{[]string{"localhost"}, "http://localhost:3000/x", ""},
	} {
		g, err := queue.NewWebhookGuard(queue.WebhookPolicy{Allow: tc.allow})
		if err != nil {
			t.Fatal(err)
		}
		err = g.CheckURL(tc.url)
		if tc.why == "" && err != nil {
			t.Errorf("%s %v: %v", tc.url, tc.allow, err)
		}
		if tc.why != "" && (!errors.Is(err, queue.ErrWebhookForbidden) || !strings.Contains(err.Error(), tc.why)) {
			t.Errorf("%s %v: got %v, want forbidden as %s", tc.url, tc.allow, err, tc.why)
		}
	}
}
