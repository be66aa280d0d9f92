package lbproxy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"berth/queue"
	"berth/store"
)

// nopQueue is the runtime's queue for the endpoints that are not
// load-balancing (none here).
type nopQueue struct{}

func (nopQueue) Stats(string) queue.QueueStats { return queue.QueueStats{} }
func (nopQueue) RegisterWorker(ep string, _ bool) (queue.Registration, error) {
	return queue.Registration{}, nil
}
func (nopQueue) WorkerGone(string, string)         {}
func (nopQueue) ForgetWorker(string)               {}
func (nopQueue) Workers(string) []queue.WorkerLoad { return nil }
func (nopQueue) PendingStops(string) []string      { return nil }
func (nopQueue) SetFrozen(string, bool)            {}
func (nopQueue) DrainWorker(string) int            { return 0 }

// BenchmarkProxyOverhead measures what the proxy adds to a small request:
// the same GET to the same in-process worker server, directly and through
// the load balancer (path addressing, key check, least-loaded pick,
// ReverseProxy), in the same run. It reports p50/p99 of each and their
// difference.
func BenchmarkProxyOverhead(b *testing.B) {
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"ok":true}`)
	}))
	defer worker.Close()
	host, port, _ := net.SplitHostPort(worker.Listener.Addr().String())
	ep := store.Endpoint{ID: "benchendpoint1", Type: store.EndpointLoadBalancer, ScalerValue: 4}
	lb := New(Config{
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Endpoint: func(string) (store.Endpoint, error) { return ep, nil },
		WorkerNet: func(context.Context, string) (WorkerNet, error) {
			return WorkerNet{IP: host, Env: map[string]string{"PORT": port, "HEALTH_CHECK_PATH": "/"}}, nil
		},
		Authorize: func(*http.Request, string) (int, string) { return 0, "" },
	})
	defer lb.Stop()
	if _, err := lb.Queue(nopQueue{}).RegisterWorker(ep.ID, false); err != nil {
		b.Fatal(err)
	}
	lb.probeAll()
	lb.probeAll()
	front := httptest.NewServer(lb.Handler(http.NotFoundHandler()))
	defer front.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}

	get := func(url string) time.Duration {
		start := time.Now()
		res, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			b.Fatalf("%s: %d", url, res.StatusCode)
		}
		return time.Since(start)
	}
	direct, proxied := worker.URL+"/", front.URL+"/lb/"+ep.ID+"/"
	get(direct)
	get(proxied)
	var d, p []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Interleaved, so machine noise hits both alike.
		d = append(d, get(direct))
		p = append(p, get(proxied))
	}
	b.StopTimer()
	slices.Sort(d)
	slices.Sort(p)
	q := func(s []time.Duration, f float64) float64 { return float64(s[int(f*float64(len(s)-1))].Microseconds()) }
	b.ReportMetric(q(d, .5), "direct-p50-µs")
	b.ReportMetric(q(d, .99), "direct-p99-µs")
	b.ReportMetric(q(p, .5), "proxied-p50-µs")
	b.ReportMetric(q(p, .99), "proxied-p99-µs")
	b.ReportMetric(q(p, .5)-q(d, .5), "overhead-p50-µs")
	b.ReportMetric(q(p, .99)-q(d, .99), "overhead-p99-µs")
}
