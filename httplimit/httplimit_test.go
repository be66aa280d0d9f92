package httplimit_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth/httplimit"
)

// serve runs h behind l on a loopback listener until the test ends.
func serve(t *testing.T, l httplimit.Limits, h http.Handler) (*httplimit.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := l.NewServer(h)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return srv, ln.Addr().String()
}

// dial opens a raw connection and sends head as is.
func dial(t *testing.T, addr, head string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	return c, bufio.NewReader(c)
}

// answer reads one response; it fails the test when none comes.
func answer(t *testing.T, br *bufio.Reader) (*http.Response, string) {
	t.Helper()
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// closed fails the test unless the server closes the connection (EOF, or
// a reset when a byte the client had in flight met the closed socket).
func closed(t *testing.T, c net.Conn, br *bufio.Reader, within time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(within))
	if _, err := br.ReadByte(); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the connection is still open: %v", err)
	}
}

// Whatever refuses a request without reading its body — no route, wrong
// method, no key — answers at once and closes the connection, although the
// client announced a body it never sends or sends a byte at a time.
func TestRefusalOfAnUnreadBodyIsImmediate(t *testing.T) {
	_, addr := serve(t, httplimit.Limits{BodyGrace: time.Minute}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such route", http.StatusNotFound)
	}))
	for _, drip := range []bool{false, true} {
		start := time.Now()
		c, br := dial(t, addr, "POST /nonexistent HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
		stop := make(chan struct{})
		if drip { // 20 bytes/s
			go func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
						if _, err := c.Write([]byte("x")); err != nil {
							return
						}
					}
				}
			}()
		}
		res, _ := answer(t, br)
		took := time.Since(start)
		close(stop)
		if res.StatusCode != http.StatusNotFound || took > 5*time.Second {
			t.Fatalf("drip=%v: %d after %s, want 404 at once", drip, res.StatusCode, took)
		}
		closed(t, c, br, 5*time.Second)
		t.Logf("drip=%v: 404 after %s, then closed", drip, took.Round(time.Millisecond))
	}
}

// A body that does not come is cut off after the grace: the handler's read
// fails with ErrSlowBody, its refusal goes out as 408, and the connection
// is closed.
func TestWithheldBodyIsCutOff(t *testing.T) {
	readErr := make(chan error, 1)
	_, addr := serve(t, httplimit.Limits{BodyGrace: 300 * time.Millisecond, MinBodyRate: 1000}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
		http.Error(w, "read request body: "+err.Error(), http.StatusBadRequest)
	}))
	start := time.Now()
	c, br := dial(t, addr, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc")
	res, body := answer(t, br)
	took := time.Since(start)
	if err := <-readErr; !errors.Is(err, httplimit.ErrSlowBody) {
		t.Errorf("the handler read %v, want ErrSlowBody", err)
	}
	if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(body, "too slowly") {
		t.Fatalf("got %d %q, want 408 saying the body came too slowly", res.StatusCode, body)
	}
	if took < 300*time.Millisecond {
		t.Errorf("cut off after %s, before the grace", took)
	}
	closed(t, c, br, 5*time.Second)
}

// A 2xx answer to a request whose body was not read waits a moment for the
// body, not the whole body deadline; a body that was sent keeps the
// connection alive for the next request.
func TestUnreadBodyOfAnAnswer(t *testing.T) {
	_, addr := serve(t, httplimit.Limits{BodyGrace: time.Minute, UnreadGrace: 200 * time.Millisecond}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	start := time.Now()
	c, br := dial(t, addr, "POST /ignored HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
	res, _ := answer(t, br)
	if took := time.Since(start); res.StatusCode != 200 || took > 5*time.Second {
		t.Fatalf("%d after %s, want 200 within the unread grace", res.StatusCode, took)
	}
	closed(t, c, br, 5*time.Second)

	c, br = dial(t, addr, "POST /ignored HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
	if res, _ := answer(t, br); res.StatusCode != 200 {
		t.Fatalf("first: %d", res.StatusCode)
	}
	io.WriteString(c, "GET /again HTTP/1.1\r\nHost: x\r\n\r\n")
	if res, _ := answer(t, br); res.StatusCode != 200 {
		t.Fatalf("second request on the kept connection: %d", res.StatusCode)
	}
}

// A client that asked for 100-continue and is refused never gets asked for
// its body: the refusal is immediate.
func TestExpectContinueRefused(t *testing.T) {
	_, addr := serve(t, httplimit.Limits{BodyGrace: time.Minute}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "missing or invalid API key", http.StatusUnauthorized)
	}))
	c, br := dial(t, addr, "POST /v2/x/run HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1000000\r\n\r\n")
	res, _ := answer(t, br)
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("got %d, want 401 (and no 100 Continue)", res.StatusCode)
	}
	closed(t, c, br, 5*time.Second)
}

// A body read at a steady rate outlasts the grace, and a long poll after
// it is not cut by the body deadline.
func TestSteadyBodyThenLongPoll(t *testing.T) {
	_, addr := serve(t, httplimit.Limits{BodyGrace: 300 * time.Millisecond, MinBodyRate: 1000}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select { // a long poll: well past the body's deadline
		case <-time.After(time.Second):
		case <-r.Context().Done():
			return
		}
		fmt.Fprintf(w, "%d", len(b))
	}))
	c, br := dial(t, addr, "POST /runsync HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n")
	// 100 bytes every 50 ms: 2000 bytes/s, twice the minimum, for 1 s
	// (three times the grace). Each write is due at a fixed moment from the
	// start, so a late wake-up on a loaded machine delays that write only:
	// the lag does not add up, and the margin grows with every write.
	start := time.Now()
	for i := 1; i <= 20; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * 50 * time.Millisecond)))
		if _, err := c.Write([]byte(strings.Repeat("a", 100))); err != nil {
			t.Fatal(err)
		}
	}
	if res, body := answer(t, br); res.StatusCode != 200 || body != "2000" {
		t.Fatalf("got %d %q", res.StatusCode, body)
	}
}

// Each write must complete within WriteTimeout: a client that stops
// reading frees the handler, one that keeps reading streams for longer
// than WriteTimeout.
func TestWriteDeadlinePerWrite(t *testing.T) {
	writeErr := make(chan error, 1)
	chunk := strings.Repeat("x", 64<<10)
	_, addr := serve(t, httplimit.Limits{WriteTimeout: 300 * time.Millisecond}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" { // 12 chunks over 1.2 s: four times WriteTimeout
			for i := 0; i < 12; i++ {
				time.Sleep(100 * time.Millisecond)
				if _, err := io.WriteString(w, "tick\n"); err != nil {
					writeErr <- err
					return
				}
				http.NewResponseController(w).Flush()
			}
			return
		}
		for { // a large response nobody reads
			if _, err := io.WriteString(w, chunk); err != nil {
				writeErr <- err
				return
			}
		}
	}))
	dial(t, addr, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n") // never read
	select {
	case err := <-writeErr:
		t.Logf("the write to a client that stopped reading failed: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the handler is still writing to a client that stopped reading")
	}

	res, err := http.Get("http://" + addr + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if n := strings.Count(string(b), "tick"); n != 12 {
		t.Fatalf("the stream was cut after %d chunks", n)
	}
	select {
	case err := <-writeErr:
		t.Fatalf("stream write failed: %v", err)
	default:
	}
}

// The server's own limits are set: slow headers and idle connections are
// closed.
func TestHeaderAndIdleTimeouts(t *testing.T) {
	_, addr := serve(t, httplimit.Limits{HeaderTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	c, br := dial(t, addr, "GET / HTTP/1.1\r\nHost: x\r\n") // headers never finished
	closed(t, c, br, 10*time.Second)
	c, br = dial(t, addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if res, _ := answer(t, br); res.StatusCode != 200 {
		t.Fatal(res.Status)
	}
	closed(t, c, br, 10*time.Second) // idle after the answer
}

// Stop gives requests in flight the grace, then cancels their contexts and
// closes their connections instead of waiting for work that ignores its
// context.
func TestStopAbandonsStuckWork(t *testing.T) {
	cause := make(chan error, 1)
	block := make(chan struct{})
	defer close(block)
	started := make(chan struct{}, 2)
	srv, addr := serve(t, httplimit.Limits{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		if r.URL.Path == "/polite" {
			<-r.Context().Done()
			cause <- context.Cause(r.Context())
			return
		}
		<-block // ignores its context
	}))
	for _, p := range []string{"/polite", "/stuck"} {
		go http.Get("http://" + addr + p)
		<-started
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if c, a := srv.Stop(ctx); c != 2 || a != 1 {
		t.Errorf("Stop cancelled %d requests and abandoned %d, want 2 and 1 (the one ignoring its context)", c, a)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Stop took %s", took)
	}
	if err := <-cause; !errors.Is(err, httplimit.ErrShutdown) {
		t.Errorf("the polite handler's context ended with %v, want ErrShutdown", err)
	}
}

// A protocol upgrade proxied through the limits (the load balancer's
// WebSockets: httputil.ReverseProxy hijacks the connection) is not cut by
// the body or write deadlines: hijacking clears them.
func TestUpgradedConnectionOutlivesTheDeadlines(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		for { // echo lines
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			brw.WriteString(line)
			brw.Flush()
		}
	}))
	defer backend.Close()
	target, _ := url.Parse(backend.URL)
	_, addr := serve(t, httplimit.Limits{BodyGrace: 200 * time.Millisecond, MinBodyRate: 1000, WriteTimeout: 200 * time.Millisecond},
		httputil.NewSingleHostReverseProxy(target))
	c, br := dial(t, addr, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", res, err)
	}
	for i := 0; i < 3; i++ {
		time.Sleep(400 * time.Millisecond) // past both deadlines each time
		fmt.Fprintf(c, "ping %d\n", i)
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("ping %d\n", i) {
			t.Fatalf("after %d×400 ms: %q %v", i+1, line, err)
		}
	}
}
