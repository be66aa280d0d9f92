package httpapi

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/gorilla/mux"
)

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
