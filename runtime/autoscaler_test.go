package runtime

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"berth/queue"
	"berth/store"
)

func ep(mod func(*store.Endpoint)) store.Endpoint {
	e := store.Endpoint{ID: "ep", Version: 2, ScalerType: ScalerQueueDelay, ScalerValue: 4,
		WorkersMin: 0, WorkersMax: 3, IdleTimeout: 5}
	if mod != nil {
		mod(&e)
	}
	return e
}

func cur(id string, p phase, idle time.Duration, running int) workerView {
	return workerView{id: id, current: true, phase: p, idleFor: idle, running: running}
}

func old(id string, p phase, idle time.Duration, running int) workerView {
	w := cur(id, p, idle, running)
	w.current = false
	return w
}

func drained(p scalePlan) []string {
	var ids []string
	for _, d := range p.drain {
		ids = append(ids, d.id)
	}
	slices.Sort(ids)
	return ids
}

func TestPlanScale(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ep        store.Endpoint
		stats     queue.QueueStats
		workers   []workerView
		start     int
		drain     []string
		want      int
		reasonHas string
	}{
		{name: "nothing to do", ep: ep(nil)},
		{name: "scale from zero at once", ep: ep(nil), stats: queue.QueueStats{InQueue: 1}, start: 1, want: 1},
		{name: "low priority never scales up", ep: ep(nil), stats: queue.QueueStats{InQueue: 2, LowPriority: 2, OldestWait: 0}},
		{name: "low priority served by workersMin", ep: ep(func(e *store.Endpoint) { e.WorkersMin = 1 }),
			stats: queue.QueueStats{InQueue: 2, LowPriority: 2}, start: 1, want: 1},
		{name: "queue delay below threshold", ep: ep(nil), stats: queue.QueueStats{InQueue: 3, OldestWait: 3 * time.Second},
			workers: []workerView{cur("a", phaseRunning, 0, 1)}, want: 0},
		{name: "queue delay above threshold", ep: ep(nil), stats: queue.QueueStats{InQueue: 3, OldestWait: 5 * time.Second},
			workers: []workerView{cur("a", phaseRunning, 0, 1)}, start: 1, want: 2},
		{name: "queue delay waits for a starting worker", ep: ep(nil), stats: queue.QueueStats{InQueue: 3, OldestWait: 9 * time.Second},
			workers: []workerView{cur("a", phaseRunning, 0, 1), cur("b", phaseInitializing, 0, 0)}, want: 0},
		{name: "request count", ep: ep(func(e *store.Endpoint) { e.ScalerType, e.ScalerValue, e.WorkersMax = ScalerRequestCount, 2, 10 }),
			stats:   queue.QueueStats{InQueue: 6, LowPriority: 1, InProgress: 2},
			workers: []workerView{cur("a", phaseRunning, 0, 1), cur("b", phaseRunning, 0, 1)}, start: 2, want: 4},
		{name: "request count capped by workersMax", ep: ep(func(e *store.Endpoint) { e.ScalerType, e.ScalerValue = ScalerRequestCount, 1 }),
			stats: queue.QueueStats{InQueue: 9}, start: 3, want: 3, reasonHas: "workersMax (3) reached: 9 job(s) waiting"},
		{name: "workersMax zero", ep: ep(func(e *store.Endpoint) { e.WorkersMax = 0 }), stats: queue.QueueStats{InQueue: 1},
			reasonHas: "workersMax is 0"},
		{name: "workersMin kept warm", ep: ep(func(e *store.Endpoint) { e.WorkersMin = 2 }), start: 2, want: 2},
		{name: "workersMin above max is capped", ep: ep(func(e *store.Endpoint) { e.WorkersMin, e.WorkersMax = 5, 1 }), start: 1, want: 1},
		{name: "idle timeout down to min", ep: ep(func(e *store.Endpoint) { e.WorkersMin = 1 }),
			workers: []workerView{cur("a", phaseIdle, 6*time.Second, 0), cur("b", phaseIdle, 9*time.Second, 0), cur("c", phaseIdle, time.Second, 0)},
			drain:   []string{"a", "b"}, want: 1},
		{name: "idle timeout to zero", ep: ep(nil),
			workers: []workerView{cur("a", phaseIdle, 5*time.Second, 0)}, drain: []string{"a"}},
		{name: "no idle stop while jobs wait", ep: ep(nil), stats: queue.QueueStats{InQueue: 1},
			workers: []workerView{cur("a", phaseIdle, 60*time.Second, 0)}},
		{name: "busy and initializing workers are not idle", ep: ep(nil),
			workers: []workerView{cur("a", phaseRunning, 0, 1), cur("b", phaseInitializing, 0, 0)}},
		{name: "workersMax lowered", ep: ep(func(e *store.Endpoint) { e.WorkersMax = 1 }),
			workers: []workerView{cur("a", phaseRunning, 0, 2), cur("b", phaseRunning, 0, 1), cur("c", phaseIdle, 0, 0)},
			drain:   []string{"b", "c"}},
		{name: "roll: start successors first", ep: ep(nil),
			workers: []workerView{old("o1", phaseIdle, time.Second, 0), old("o2", phaseRunning, 0, 1)}, start: 2},
		{name: "roll: successors still starting", ep: ep(nil),
			workers: []workerView{old("o1", phaseIdle, time.Second, 0), old("o2", phaseRunning, 0, 1),
				cur("n1", phaseStarting, 0, 0), cur("n2", phaseInitializing, 0, 0)}},
		{name: "roll: one successor ready", ep: ep(nil),
			workers: []workerView{old("o1", phaseIdle, time.Second, 0), old("o2", phaseRunning, 0, 1),
				cur("n1", phaseIdle, 0, 0), cur("n2", phaseInitializing, 0, 0)}, drain: []string{"o1"}},
		{name: "roll: all ready", ep: ep(nil),
			workers: []workerView{old("o2", phaseRunning, 0, 1), cur("n1", phaseIdle, 0, 0), cur("n2", phaseRunning, 0, 1)},
			drain:   []string{"o2"}},
		{name: "roll: idle old worker just stops", ep: ep(nil),
			workers: []workerView{old("o1", phaseIdle, 10*time.Second, 0)}, drain: []string{"o1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planScale(scaleInput{ep: tc.ep, stats: tc.stats, workers: tc.workers})
			if p.start != tc.start || !slices.Equal(drained(p), tc.drain) || p.want != tc.want {
				t.Fatalf("start %d drain %v want %d; expected start %d drain %v want %d (plan %+v)",
					p.start, drained(p), p.want, tc.start, tc.drain, tc.want, p)
			}
			if tc.reasonHas == "" && p.reason != "" || !strings.Contains(p.reason, tc.reasonHas) {
				t.Fatalf("reason %q, want it to contain %q", p.reason, tc.reasonHas)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	s := &Supervisor{cfg: Config{BackoffBase: time.Second, BackoffMax: 10 * time.Second}}
	for n, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 50: 10 * time.Second} {
		if got := s.backoff(n); got != want {
			t.Errorf("backoff(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestSpecKey(t *testing.T) {
	e := store.Endpoint{ID: "e", ComputeType: "GPU", GPUCount: 1}
	tm := store.Template{ImageName: "img:1"}
	k := specKey(e, tm)
	e2 := e
	e2.GPUTypeIDs, e2.Env = []string{}, map[string]string{}
	e2.WorkersMax, e2.IdleTimeout = 9, 100 // scaling does not change containers
	if specKey(e2, tm) != k {
		t.Fatal("empty vs nil or scaling fields changed the key")
	}
	tm.Env = map[string]string{"A": "1"}
	if specKey(e, tm) == k {
		t.Fatal("template env did not change the key")
	}
}

func TestFilterJobLogs(t *testing.T) {
	in := strings.Join([]string{
		`plain line`,
		`{"requestId": "j1", "message": "one", "level": "INFO"}`,
		`{"requestId": null, "message": "idle", "level": "DEBUG"}`,
		`{"requestId": "j2", "message": "other", "level": "INFO"}`,
		`{"requestId": "j1", "message": "two", "level": "ERROR"}`,
	}, "\n")
	rc := FilterJobLogs(io.NopCloser(strings.NewReader(in)), "j1")
	defer rc.Close()
	b := new(strings.Builder)
	if _, err := io.Copy(b, rc); err != nil {
		t.Fatal(err)
	}
	want := `{"requestId": "j1", "message": "one", "level": "INFO"}` + "\n" + `{"requestId": "j1", "message": "two", "level": "ERROR"}` + "\n"
	if b.String() != want {
		t.Fatalf("got %q", b.String())
	}
}

func frozenW(id string, at time.Duration, running int) workerView {
	w := cur(id, phaseIdle, 0, running)
	w.frozen, w.frozenAt = true, time.Unix(0, 0).Add(at)
	return w
}

func TestPlanScaleFlashBoot(t *testing.T) {
	fb := func(mod func(*store.Endpoint)) store.Endpoint {
		return ep(func(e *store.Endpoint) {
			e.Flashboot = true
			if mod != nil {
				mod(e)
			}
		})
	}
	for _, tc := range []struct {
		name                string
		ep                  store.Endpoint
		stats               queue.QueueStats
		workers             []workerView
		start               int
		drain, freeze, thaw []string
	}{
		{name: "idle past the timeout is frozen, not drained", ep: fb(nil),
			workers: []workerView{cur("a", phaseIdle, 6*time.Second, 0), cur("b", phaseIdle, time.Second, 0)}, freeze: []string{"a"}},
		{name: "workersMin stays warm", ep: fb(func(e *store.Endpoint) { e.WorkersMin = 1 }),
			workers: []workerView{cur("a", phaseIdle, 6*time.Second, 0), cur("b", phaseIdle, 9*time.Second, 0)}, freeze: []string{"b"}},
		{name: "frozen workers do not count towards workersMin", ep: fb(func(e *store.Endpoint) { e.WorkersMin = 1 }),
			workers: []workerView{frozenW("a", 0, 0), cur("b", phaseIdle, 9*time.Second, 0)}},
		{name: "an old version is drained, not frozen", ep: fb(nil),
			workers: []workerView{old("o", phaseIdle, 9*time.Second, 0)}, drain: []string{"o"}},
		{name: "a job thaws the most recently frozen instead of starting", ep: fb(nil), stats: queue.QueueStats{InQueue: 1},
			workers: []workerView{frozenW("a", 1, 0), frozenW("b", 2, 0)}, thaw: []string{"b"}},
		{name: "a frozen worker handed a job is thawed", ep: fb(nil), stats: queue.QueueStats{InProgress: 1},
			workers: []workerView{frozenW("a", 1, 1), frozenW("b", 2, 0)}, thaw: []string{"a"}},
		{name: "frozen workers hold their place under workersMax", ep: fb(func(e *store.Endpoint) {
			e.ScalerType, e.ScalerValue, e.WorkersMax = ScalerRequestCount, 1, 3
		}), stats: queue.QueueStats{InQueue: 5},
			workers: []workerView{frozenW("a", 1, 0), frozenW("b", 2, 0)}, thaw: []string{"b", "a"}, start: 1},
		{name: "flashboot turned off drains frozen workers", ep: ep(nil),
			workers: []workerView{frozenW("a", 1, 0)}, drain: []string{"a"}},
		{name: "no flashboot: scale to zero as before", ep: ep(nil),
			workers: []workerView{cur("a", phaseIdle, 6*time.Second, 0)}, drain: []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planScale(scaleInput{ep: tc.ep, stats: tc.stats, workers: tc.workers})
			if p.start != tc.start || !slices.Equal(drained(p), tc.drain) || !slices.Equal(p.freeze, tc.freeze) || !slices.Equal(p.thaw, tc.thaw) {
				t.Fatalf("start %d drain %v freeze %v thaw %v; expected %d %v %v %v",
					p.start, drained(p), p.freeze, p.thaw, tc.start, tc.drain, tc.freeze, tc.thaw)
			}
		})
	}
}
