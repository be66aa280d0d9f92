package httpapi

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/mux"
	"golang.org/x/time/rate"
)

// Rate limits of the specification, per endpoint and operation: requests
// per 10 seconds and concurrent requests (0: no cap). The effective request
// limit is max(base, running workers × requests per worker).
var baseLimits = map[string]struct{ per10s, concurrent int }{
	"runsync":     {2000, 400},
	"run":         {1000, 200},
	"status":      {2000, 400},
	"status-sync": {2000, 400},
	"stream":      {2000, 400},
	"cancel":      {100, 20},
	"retry":       {100, 20},
	"purge-queue": {2, 0},
	"openai":      {2000, 400}, // /openai/* (GET /openai/v1/models too)
}

type limiter struct {
	on        bool
	perWorker int
	workers   func(endpointID string) int

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	lim      *rate.Limiter
	per10s   int
	checked  time.Time // when per10s was last recomputed
	inflight int
}

func newLimiter(on bool, perWorker int, workers func(string) int) *limiter {
	return &limiter{on: on, perWorker: perWorker, workers: workers, buckets: map[string]*bucket{}}
}

func (l *limiter) wrap(op string, h http.HandlerFunc) http.HandlerFunc {
	base, limited := baseLimits[op]
	if !l.on || !limited {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		ep := mux.Vars(r)["endpointId"]
		now := time.Now()
		l.mu.Lock()
		b := l.buckets[ep+"/"+op]
		if b == nil || now.Sub(b.checked) >= time.Second {
			// The dynamic limit follows the live workers; counting them
			// once a second per bucket keeps it off every request.
			l.mu.Unlock()
			eff := base.per10s
			if dyn := l.workers(ep) * l.perWorker; dyn > eff {
				eff = dyn
			}
			l.mu.Lock()
			if b = l.buckets[ep+"/"+op]; b == nil {
				b = &bucket{lim: rate.NewLimiter(rate.Limit(float64(eff)/10), eff), per10s: eff}
				l.buckets[ep+"/"+op] = b
			} else if b.per10s != eff {
				b.lim.SetLimitAt(now, rate.Limit(float64(eff)/10))
				b.lim.SetBurstAt(now, eff)
				b.per10s = eff
			}
			b.checked = now
		}
		eff := b.per10s
		if base.concurrent > 0 && b.inflight >= base.concurrent {
			l.mu.Unlock()
			w.Header().Set("Retry-After", "1")
			writeErr(w, r, http.StatusTooManyRequests, fmt.Sprintf("too many concurrent %s requests for this endpoint (limit %d)", op, base.concurrent))
			return
		}
		res := b.lim.ReserveN(now, 1)
		if d := res.DelayFrom(now); d > 0 {
			res.CancelAt(now)
			l.mu.Unlock()
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(d.Seconds()))))
			writeErr(w, r, http.StatusTooManyRequests, fmt.Sprintf("rate limit of %d %s requests per 10 s exceeded for this endpoint", eff, op))
			return
		}
		b.inflight++
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			b.inflight--
			l.mu.Unlock()
		}()
		h(w, r)
	}
}

// prune drops the buckets idle for a minute: a bucket made again later
// starts full, as an idle one would be by then (10 s refill). It returns
// how many went.
func (l *limiter) prune(now time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for k, b := range l.buckets {
		if b.inflight == 0 && now.Sub(b.checked) > time.Minute {
			delete(l.buckets, k)
			n++
		}
	}
	return n
}
