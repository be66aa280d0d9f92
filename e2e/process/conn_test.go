package process_test

import (
	"berth/internal/proctest"
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// connKey is the API key of the server these tests run.
const connKey = "conn-test-key"

// serverCounts is the server's goroutines (its own /metrics) and open
// descriptors (/proc).
func serverCounts(t *testing.T, b *proctest.Berth) (goroutines, fds int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.Base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+connKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	goroutines = -1
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "go_goroutines" {
			goroutines, _ = strconv.Atoi(f[1])
		}
	}
	if goroutines < 0 {
		t.Fatalf("no go_goroutines in /metrics (%d):\n%s", res.StatusCode, body)
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", b.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	return goroutines, len(ents)
}

// TestNoRequestHoldsAConnection: a request that announces a body it never
// sends, or sends at 20 bytes/s, is answered at once and its connection
// closed, whatever it addresses — no route, a wrong method, no key on the
// job API, management or GraphQL, the load-balancer path — because the
// connection limits wrap the whole server, before any routing or key check.
// 300 such connections at once leave no goroutine or descriptor behind.
// (Before: the first two were held with no reply for as long as the client
// liked.)
func TestNoRequestHoldsAConnection(t *testing.T) {
	berth := proctest.Start(t, proctest.Options{Key: connKey, Args: []string{"--rate-limits", "on"},
		Env: []string{"DOCKER_HOST=unix:///nonexistent-berth-test"}}) // no containers needed
	addr := berth.Addr
	heads := map[string]string{
		"no route":      "POST /nonexistent HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n",
		"wrong method":  "DELETE /v1/templates HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n",
		"no key, job":   "POST /v2/abc/run HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n",
		"no key, v1":    "POST /v1/templates HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n",
		"no key, v2":    "POST /v2/templates HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n",
		"no key, gql":   "POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n",
		"wrong key, lb": "POST /lb/abc/generate HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\nContent-Length: 1000\r\n\r\n",
		"lb by Host":    "POST /generate HTTP/1.1\r\nHost: abc.lb.localhost\r\nContent-Length: 1000\r\n\r\n",
		"dashboard 404": "GET /ui/x HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n",
		"dashboard 200": "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n",
	}
	for name, head := range heads {
		for _, drip := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s drip=%v", name, drip), func(t *testing.T) {
				start := time.Now()
				code, err := holdOne(addr, head, drip, 30*time.Second)
				if err != nil {
					t.Fatalf("%v after %s", err, time.Since(start).Round(time.Millisecond))
				}
				// The dashboard answers 200/404 and gives an unread body
				// a second; every refusal is immediate.
				if took := time.Since(start); took > 5*time.Second {
					t.Errorf("answered %d after %s", code, took)
				}
			})
		}
	}

	// 300 at once, as a hostile client would.
	g0, fd0 := serverCounts(t, berth)
	var wg sync.WaitGroup
	errs := make(chan error, 300)
	start := time.Now()
	for i := 0; i < 300; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := holdOne(addr, heads["no route"], false, 30*time.Second); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The server side ends a closed connection after net/http's 0.5 s
	// linger; wait for the counts to come back.
	var g, fd int
	for deadline := time.Now().Add(30 * time.Second); ; {
		g, fd = serverCounts(t, berth)
		if g <= g0+10 && fd <= fd0+10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 300 refused connections: goroutines %d → %d, descriptors %d → %d", g0, g, fd0, fd)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("300 connections answered and closed in %s; goroutines %d → %d, descriptors %d → %d", took.Round(time.Millisecond), g0, g, fd0, fd)
}

// holdOne sends head, then nothing (or a byte every 50 ms when drip), and
// returns the status of the answer once the server has closed the
// connection; an error when either does not happen within limit.
func holdOne(addr, head string, drip bool, limit time.Duration) (int, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if _, err := io.WriteString(c, head); err != nil {
		return 0, err
	}
	stop := make(chan struct{})
	defer close(stop)
	if drip {
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
	c.SetReadDeadline(time.Now().Add(limit))
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, fmt.Errorf("no answer: %w", err)
	}
	io.Copy(io.Discard, res.Body)
	if _, err := br.ReadByte(); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
		return res.StatusCode, fmt.Errorf("answered %d but the connection stayed open: %v", res.StatusCode, err)
	}
	if !strings.HasPrefix(res.Status, fmt.Sprint(res.StatusCode)) {
		return res.StatusCode, fmt.Errorf("bad status line %q", res.Status)
	}
	return res.StatusCode, nil
}
