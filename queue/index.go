package queue

import (
	"container/heap"
	"encoding/json"
	"time"

	"berth/store"
)

// qent is a queued job's place in its endpoint's queue. For a job nobody
// is looking at (cold) it is all the queue keeps in memory: its full record
// and input stay in bbolt and are read when the job is handed out or looked
// up, which keeps a million queued jobs in a few hundred bytes each.
//
// A finished job is kept the same way (fin != 0), in its endpoint's done
// map rather than its queue: its record and output are read from bbolt by
// a look-up, and the entry goes at its deadline (retention or ttl).
type qent struct {
	id       string
	ep       *endpointQ
	j        *job // the loaded job (hot), nil when cold
	seq      uint64
	queuedAt int64   // Unix ns
	expires  int64   // Unix ns: the ttl of a cold job, the deadline of a finished one
	hidx     int32   // in the service's expiry heap; -1 when not there
	low      bool    // lowPriority
	removed  bool    // left in the ring as a tombstone
	fin      uint8   // finished: its status (finStatus); 0 while queued
	x        *qextra // rarely set: see qextra
}

// qextra is what few entries need: a finished job's record until its
// final write is on disk, and the channel of a Watch on the entry.
type qextra struct {
	rec     *store.Job
	input   json.RawMessage
	changed chan struct{}
}

// finStatus are the statuses of finished entries, by fin code.
var finStatus = [...]store.JobStatus{1: store.Completed, 2: store.Failed, 3: store.Cancelled, 4: store.TimedOut}

func finCode(st store.JobStatus) uint8 {
	for i, s := range finStatus {
		if s == st && i > 0 {
			return uint8(i)
		}
	}
	return 0
}

// deadline is when a finished job goes: its retention end or its ttl,
// whichever comes first (Unix ns).
func deadline(expires, retain time.Time) int64 {
	if !retain.IsZero() && retain.Before(expires) {
		return retain.UnixNano()
	}
	return expires.UnixNano()
}

// ring is an endpoint's FIFO: a growable ring buffer of entries, with
// removal from the middle (cancel, expiry, a look-up that loads the job
// stays in place) done by tombstones skipped at the front.
type ring struct {
	buf        []*qent
	head, n    int // n counts tombstones too
	live, dead int
}

func (r *ring) len() int { return r.live }

func (r *ring) at(i int) *qent { return r.buf[(r.head+i)&(len(r.buf)-1)] }

func (r *ring) grow() {
	size := 2 * len(r.buf)
	if size == 0 {
		size = 16
	}
	nb := make([]*qent, size)
	for i := 0; i < r.n; i++ {
		nb[i] = r.at(i)
	}
	r.buf, r.head = nb, 0
}

func (r *ring) pushBack(q *qent) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = q
	r.n++
	r.live++
}

func (r *ring) pushFront(q *qent) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.head = (r.head - 1) & (len(r.buf) - 1)
	r.buf[r.head] = q
	r.n++
	r.live++
}

// front returns the first live entry, dropping tombstones before it.
func (r *ring) front() *qent {
	for r.n > 0 {
		q := r.buf[r.head]
		if !q.removed {
			return q
		}
		r.popFront()
		r.dead--
	}
	return nil
}

func (r *ring) popFront() {
	r.buf[r.head] = nil
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
}

// remove marks q removed; the ring is compacted once tombstones outnumber
// the live entries.
func (r *ring) remove(q *qent) {
	if q.removed {
		return
	}
	q.removed = true
	r.live--
	if r.n > 0 && r.buf[r.head] == q {
		r.popFront()
		return
	}
	r.dead++
	if r.dead > 1024 && r.dead > r.live {
		r.compact()
	}
}

func (r *ring) compact() {
	size := 16
	for size < r.live {
		size *= 2
	}
	nb := make([]*qent, size)
	k := 0
	for i := 0; i < r.n; i++ {
		if q := r.at(i); !q.removed {
			nb[k] = q
			k++
		}
	}
	r.buf, r.head, r.n, r.dead = nb, 0, k, 0
}

// each calls fn for live entries front to back until it returns false.
func (r *ring) each(fn func(*qent) bool) {
	for i := 0; i < r.n; i++ {
		if q := r.at(i); !q.removed && !fn(q) {
			return
		}
	}
}

// eachBack calls fn for live entries back to front until it returns false.
func (r *ring) eachBack(fn func(*qent) bool) {
	for i := r.n - 1; i >= 0; i-- {
		if q := r.at(i); !q.removed && !fn(q) {
			return
		}
	}
}

// expiryHeap orders cold entries by ttl: one timer serves them all instead
// of a timer per job.
type expiryHeap []*qent

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires < h[j].expires }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = int32(i), int32(j)
}
func (h *expiryHeap) Push(x any) {
	q := x.(*qent)
	q.hidx = int32(len(*h))
	*h = append(*h, q)
}
func (h *expiryHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	q.hidx = -1
	return q
}

func (h *expiryHeap) add(q *qent) { heap.Push(h, q) }

func (h *expiryHeap) drop(q *qent) {
	if q.hidx >= 0 {
		heap.Remove(h, int(q.hidx))
	}
}
