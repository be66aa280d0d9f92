package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"berth/cli"
)

// startServe runs `berth serve` in-process (the real composition) on a
// loopback port until the test ends, without Docker.
func startServe(t *testing.T, key string) string {
	t.Helper()
	t.Setenv("BERTH_API_KEY", key)
	t.Setenv("DOCKER_HOST", "unix:///nonexistent-berth-test")
	ready := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, cli.ServeOptions{Addr: "127.0.0.1:0", Data: filepath.Join(t.TempDir(), "data"), RateLimits: true,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Ready: func(a string) { ready <- a }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	select {
	case a := <-ready:
		return a
	case err := <-done:
		t.Fatalf("serve ended: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("serve not ready")
	}
	return ""
}

func openFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
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
	addr := startServe(t, "conn-test-key")
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
	runtime.GC()
	g0, fd0 := runtime.NumGoroutine(), openFDs()
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
		g, fd = runtime.NumGoroutine(), openFDs()
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
