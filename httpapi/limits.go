package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"berth/httpapi/internal/httpx"
)

// Whole-request deadlines. net/http's ReadTimeout and WriteTimeout are one
// number for every request, which either cuts long polls (runsync and
// status-sync wait up to 300 s) and large uploads (job-done bodies up to
// 64 MB) or lets a client that sends its body one byte a minute hold a
// connection and a goroutine forever. Instead each request gets:
//
//   - a body deadline that moves with the data: the body must start within
//     BodyGrace and then keep up MinBodyRate on average (the deadline is
//     start + BodyGrace + bytes so far / MinBodyRate), so a 64 MB upload at
//     a sane rate goes through and a trickle is cut off;
//   - a write deadline of WriteTimeout from the start, longer than the
//     longest long poll, so a client that stops reading its response cannot
//     hold the handler forever (a followed log stream moves it per chunk).
//
// Headers are bounded by the http.Server's ReadHeaderTimeout (main.go).
type deadlines struct {
	grace   time.Duration
	rate    float64 // bytes per second
	writeTO time.Duration
}

func (d deadlines) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		start := time.Now()
		// Every request sets its own write deadline: the connection keeps
		// the previous request's otherwise.
		_ = rc.SetWriteDeadline(start.Add(d.writeTO))
		if r.Body != nil && r.Body != http.NoBody {
			if rc.SetReadDeadline(start.Add(d.grace)) == nil {
				r.Body = &pacedBody{ReadCloser: r.Body, rc: rc, d: d, start: start}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// pacedBody moves the connection's read deadline as the body arrives.
type pacedBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	d     deadlines
	start time.Time
	n     int64
	done  bool
}

func (p *pacedBody) Read(b []byte) (int, error) {
	n, err := p.ReadCloser.Read(b)
	p.n += int64(n)
	switch {
	case err == io.EOF && !p.done:
		// The whole body is in. Clear the deadline: net/http now reads
		// the connection in the background to notice a client going away,
		// and a deadline passing there would cancel a long poll.
		p.done = true
		_ = p.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		return n, fmt.Errorf("%w (%d bytes in %s; the minimum is %.0f bytes/s after %s)",
			httpx.ErrSlowBody, p.n, time.Since(p.start).Round(time.Millisecond), p.d.rate, p.d.grace)
	case err == nil && n > 0:
		_ = p.rc.SetReadDeadline(p.start.Add(p.d.grace + time.Duration(float64(p.n)/p.d.rate*float64(time.Second))))
	}
	return n, err
}

// Long polls hold a connection and a goroutine each for up to minutes, so
// their number is capped whatever --rate-limits says: per worker (job-take,
// job-take-batch, job-stop under one worker id) and per API key (runsync,
// status-sync and stream). Past a cap the request is answered 429 with
// Retry-After at once; nothing waits.
var longPollOps = map[string]bool{
	"job-take": true, "job-take-batch": true, "job-stop": true,
	"runsync": true, "status-sync": true, "stream": true,
}

type pollLimits struct {
	perWorker, perKey int

	mu    sync.Mutex
	held  map[string]int
	total int // all long polls held, for /metrics
}

// Held is the number of long polls being held.
func (p *pollLimits) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

func newPollLimits(perWorker, perKey int) *pollLimits {
	return &pollLimits{perWorker: perWorker, perKey: perKey, held: map[string]int{}}
}

// wrap caps op's handler when op is a long poll. worker says whether the
// route is the worker protocol (counted per worker) or the job API
// (counted per key).
func (p *pollLimits) wrap(op string, worker bool, h http.HandlerFunc) http.HandlerFunc {
	if !longPollOps[op] {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		key, limit, who := "", p.perKey, "this API key"
		if worker {
			v := mux.Vars(r)
			key, limit, who = "w\x00"+v["endpointId"]+"\x00"+v["workerId"], p.perWorker, "worker "+v["workerId"]
		} else {
			key = "k\x00" + apiKey(r)
		}
		p.mu.Lock()
		if p.held[key] >= limit {
			p.mu.Unlock()
			w.Header().Set("Retry-After", "1")
			writeErr(w, r, http.StatusTooManyRequests, fmt.Sprintf("too many concurrent long polls for %s (limit %d)", who, limit))
			return
		}
		p.held[key]++
		p.total++
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			p.total--
			if p.held[key]--; p.held[key] == 0 {
				delete(p.held, key)
			}
			p.mu.Unlock()
		}()
		h(w, r)
	}
}
