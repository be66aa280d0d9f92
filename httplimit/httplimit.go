// Package httplimit bounds what one HTTP connection can hold, for every
// request the server reads — whatever route or method it names, with or
// without a key, load-balancer paths and the dashboard included — because
// it wraps the server's outermost handler and sets the http.Server's own
// limits:
//
//   - the request line and headers must arrive within HeaderTimeout and
//     fit in MaxHeaderBytes;
//   - a body must start within BodyGrace and then average MinBodyRate (the
//     read deadline is start + BodyGrace + bytes so far / MinBodyRate, moved
//     by each read), so a large upload at a sane rate goes through and a
//     trickle is cut off; the handler's read fails with ErrSlowBody, its
//     refusal goes out as 408 Request Timeout and the connection is closed;
//   - a request answered before its body was read is answered at once and
//     its connection closed when the answer is an error (4xx/5xx: the body
//     is not wanted), or given a second for the rest of the body to arrive
//     otherwise; net/http would otherwise wait for the whole body before
//     sending the answer;
//   - each write of the response must complete within WriteTimeout (the
//     first one counted from the request's start), so a client that stops
//     reading cannot hold the handler, while a long poll that answers after
//     minutes and a stream that a client keeps reading are never cut;
//   - an idle keep-alive connection is closed after IdleTimeout.
//
// net/http's single ReadTimeout and WriteTimeout cannot do this: any one
// value either cuts long polls (runsync waits up to 300 s) and large
// uploads (job-done bodies up to 64 MB) or lets a client that sends its
// body a byte a minute hold a connection and a goroutine forever.
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Limits are the bounds; the zero value of a field is its default.
type Limits struct {
	HeaderTimeout  time.Duration // request line and headers [10s]
	MaxHeaderBytes int           // [64 KiB]
	IdleTimeout    time.Duration // between requests on a keep-alive connection [2m]
	BodyGrace      time.Duration // a body must start within it [10s]
	MinBodyRate    int           // then average this many bytes/s [64 KiB/s]
	WriteTimeout   time.Duration // each response write [6m: above the longest long poll, 300 s]
	// UnreadGrace is how long a request answered with 2xx/3xx before its
	// body was read waits for the rest of the body [1s].
	UnreadGrace time.Duration
}

func (l Limits) withDefaults() Limits {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&l.HeaderTimeout, 10*time.Second)
	def(&l.IdleTimeout, 2*time.Minute)
	def(&l.BodyGrace, 10*time.Second)
	def(&l.WriteTimeout, 6*time.Minute)
	def(&l.UnreadGrace, time.Second)
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = 64 << 10
	}
	if l.MinBodyRate <= 0 {
		l.MinBodyRate = 64 << 10
	}
	return l
}

// Server is an http.Server with the limits applied to h, and a Stop that
// does not wait for abandoned work.
type Server struct {
	*http.Server
	base   context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	inflight int
	idle     chan struct{} // closed while inflight is 0
}

// ErrShutdown is the cause of a request context cancelled because the
// server stopped before its handler returned.
var ErrShutdown = errors.New("the server is shutting down")

// NewServer returns a server for h with l applied. Every handler's context
// is a child of the server's, which Stop cancels.
func (l Limits) NewServer(h http.Handler) *Server {
	l = l.withDefaults()
	s := &Server{idle: make(chan struct{})}
	close(s.idle)
	s.base, s.cancel = context.WithCancelCause(context.Background())
	inner := l.Handler(h)
	s.Server = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.enter()
			defer s.leave()
			inner.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: l.HeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return s.base },
	}
	return s
}

func (s *Server) enter() {
	s.mu.Lock()
	if s.inflight == 0 {
		s.idle = make(chan struct{})
	}
	s.inflight++
	s.mu.Unlock()
}

func (s *Server) leave() {
	s.mu.Lock()
	if s.inflight--; s.inflight == 0 {
		close(s.idle)
	}
	s.mu.Unlock()
}

// InFlight is the number of requests whose handlers are running.
func (s *Server) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inflight
}

// Stop stops accepting, lets requests in flight finish until ctx ends,
// then cancels the contexts of those still running (cause ErrShutdown),
// closes their connections and gives them a second to return: a handler
// that ignores its context is abandoned rather than waited for. It returns
// how many requests were cancelled (still running when ctx ended) and how
// many of those were abandoned (still running a second later).
func (s *Server) Stop(ctx context.Context) (cancelled, abandoned int) {
	if s.Shutdown(ctx) == nil {
		return 0, 0
	}
	cancelled = s.InFlight()
	s.cancel(ErrShutdown)
	s.Close()
	s.mu.Lock()
	idle := s.idle
	s.mu.Unlock()
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
	return cancelled, s.InFlight()
}

// ErrSlowBody is what a handler reading a body that arrives too slowly
// gets (wrapped, with the figures).
var ErrSlowBody = errors.New("request body arrived too slowly")

// Handler applies the per-request limits (body pace, unread bodies, write
// deadlines) to h. NewServer uses it; tests that build their own server
// can too.
func (l Limits) Handler(h http.Handler) http.Handler {
	l = l.withDefaults()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		start := time.Now()
		// The connection keeps the previous request's deadlines otherwise.
		_ = rc.SetWriteDeadline(start.Add(l.WriteTimeout))
		lw := &writer{ResponseWriter: w, rc: rc, l: l}
		if r.Body != nil && r.Body != http.NoBody {
			if rc.SetReadDeadline(start.Add(l.BodyGrace)) == nil {
				lw.body = &pacedBody{ReadCloser: r.Body, rc: rc, l: l, start: start}
				lw.expect100 = strings.EqualFold(r.Header.Get("Expect"), "100-continue")
				// A shallow copy: net/http decides what to do with an
				// unread body by the type of its own Request's Body.
				r2 := *r
				r2.Body = lw.body
				r = &r2
			}
		}
		h.ServeHTTP(lw, r)
		if !lw.wrote {
			lw.beforeHeader(http.StatusOK)
		}
	})
}

// writer moves the write deadline before each write and decides, when the
// header goes out, what happens to a body the handler did not read.
type writer struct {
	http.ResponseWriter
	rc        *http.ResponseController
	l         Limits
	body      *pacedBody // nil without a body
	expect100 bool
	wrote     bool
}

// Unwrap lets http.ResponseController reach the connection (deadlines,
// flushes, hijacking for protocol upgrades).
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *writer) beforeHeader(code int) {
	w.wrote = true
	b := w.body
	if b == nil || b.done.Load() {
		return
	}
	if w.expect100 && b.n.Load() == 0 {
		return // net/http never asked for the body; it closes the connection itself
	}
	if code >= 400 {
		// The body is not wanted: answer now and close, rather than
		// let net/http read (or wait for) the rest first — it would,
		// even when closing, when it closes the body after the handler.
		w.Header().Set("Connection", "close")
		_ = w.rc.SetReadDeadline(time.Now())
		return
	}
	// net/http reads what is left before answering, to keep the
	// connection: give it a moment, not the whole body deadline.
	if d := time.Now().Add(w.l.UnreadGrace); d.Before(b.deadline()) {
		_ = w.rc.SetReadDeadline(d)
	}
}

func (w *writer) WriteHeader(code int) {
	if !w.wrote && code >= 200 {
		if w.body != nil && w.body.slow.Load() && code >= 400 && code < 500 {
			code = http.StatusRequestTimeout // whatever the handler made of the read error
		}
		w.beforeHeader(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *writer) Write(p []byte) (int, error) {
	if !w.wrote {
		w.beforeHeader(http.StatusOK)
	}
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.l.WriteTimeout))
	return w.ResponseWriter.Write(p)
}

func (w *writer) Flush() {
	if !w.wrote {
		w.beforeHeader(http.StatusOK)
	}
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.l.WriteTimeout))
	_ = w.rc.Flush()
}

// pacedBody moves the connection's read deadline as the body arrives.
type pacedBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	l     Limits
	start time.Time
	n     atomic.Int64
	done  atomic.Bool
	slow  atomic.Bool // cut off by the pace
}

func (p *pacedBody) deadline() time.Time {
	return p.start.Add(p.l.BodyGrace + time.Duration(float64(p.n.Load())/float64(p.l.MinBodyRate)*float64(time.Second)))
}

func (p *pacedBody) Read(b []byte) (int, error) {
	n, err := p.ReadCloser.Read(b)
	total := p.n.Add(int64(n))
	switch {
	case err == io.EOF && !p.done.Load():
		// The whole body is in. Clear the deadline: net/http now reads
		// the connection in the background to notice a client going
		// away, and a deadline passing there would cancel a long poll.
		p.done.Store(true)
		_ = p.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		p.slow.Store(true)
		return n, fmt.Errorf("%w (%d bytes in %s; the minimum is %d bytes/s after %s)",
			ErrSlowBody, total, time.Since(p.start).Round(time.Millisecond), p.l.MinBodyRate, p.l.BodyGrace)
	case err == nil && n > 0:
		_ = p.rc.SetReadDeadline(p.deadline())
	}
	return n, err
}
