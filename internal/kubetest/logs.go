package kubetest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// kubeletServer is the log side of every node's kubelet: the API server
// answers pods/log by calling GET /containerLogs/NS/POD/CONTAINER on the
// node's kubelet endpoint (its InternalIP, 127.0.0.1, and
// status.daemonEndpoints.kubeletEndpoint.Port), which for every node
// AddNode makes is this server. A container's log is what the test wrote
// with Kubelet.Log (empty for a pod kwok runs); follow holds the stream
// open until the pod terminates or is deleted, as a kubelet's does. TLS
// both ways with the cluster's CA, as between an API server and a kubelet.
type kubeletServer struct {
	client kubernetes.Interface
	srv    *http.Server
	port   int

	mu   sync.Mutex
	logs map[string]*containerLog // "ns/pod/container"
}

type logLine struct {
	t time.Time
	b []byte // with its newline, when it had one
}

type containerLog struct {
	lines   []logLine
	changed chan struct{} // closed and replaced on every append
}

func startKubeletServer(client kubernetes.Interface, ca *authority, certFile, keyFile string) (*kubeletServer, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &kubeletServer{client: client, port: ln.Addr().(*net.TCPAddr).Port, logs: map[string]*containerLog{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", s.serveLogs)
	s.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{pair},
			ClientCAs:    pool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
		},
	}
	go func() { _ = s.srv.Serve(tls.NewListener(ln, s.srv.TLSConfig)) }()
	return s, nil
}

func (s *kubeletServer) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		return s.srv.Close()
	}
	return nil
}

func (s *kubeletServer) get(key string) *containerLog {
	l, ok := s.logs[key]
	if !ok {
		l = &containerLog{changed: make(chan struct{})}
		s.logs[key] = l
	}
	return l
}

func (s *kubeletServer) write(key string, p []byte) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.get(key)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n') + 1
		if i == 0 {
			i = len(p)
		}
		l.lines = append(l.lines, logLine{t: now, b: bytes.Clone(p[:i])})
		p = p[i:]
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// snapshot returns the lines from index from on and a channel closed at
// the next append.
func (s *kubeletServer) snapshot(key string, from int) ([]logLine, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.get(key)
	if from > len(l.lines) {
		from = len(l.lines)
	}
	return l.lines[from:len(l.lines):len(l.lines)], l.changed
}

func (s *kubeletServer) serveLogs(w http.ResponseWriter, r *http.Request) {
	ns, pod, container := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container")
	q := r.URL.Query()
	boolOpt := func(name string) bool { v, _ := strconv.ParseBool(q.Get(name)); return v }
	intOpt := func(name string) (int64, bool) {
		v, err := strconv.ParseInt(q.Get(name), 10, 64)
		return v, err == nil
	}
	if boolOpt("previous") {
		http.Error(w, fmt.Sprintf("previous terminated container %q in pod %q not found", container, pod), http.StatusBadRequest)
		return
	}
	follow, timestamps := boolOpt("follow"), boolOpt("timestamps")
	var since time.Time
	if secs, ok := intOpt("sinceSeconds"); ok {
		since = time.Now().Add(-time.Duration(secs) * time.Second)
	}
	if t, err := time.Parse(time.RFC3339, q.Get("sinceTime")); err == nil && t.After(since) {
		since = t
	}
	limit, limited := intOpt("limitBytes")
	key := ns + "/" + pod + "/" + container

	// Follow ends when the pod terminates or goes away: watch it.
	var podDone <-chan struct{}
	if follow {
		done := make(chan struct{})
		podDone = done
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		go s.watchPodEnd(ctx, ns, pod, done)
	}

	lines, changed := s.snapshot(key, 0)
	next := len(lines) // index in the whole log of the next line to send
	if tail, ok := intOpt("tailLines"); ok && tail >= 0 && int64(len(lines)) > tail {
		lines = lines[int64(len(lines))-tail:]
	}
	w.Header().Set("Content-Type", "text/plain")
	flusher, _ := w.(http.Flusher)
	var sent int64
	send := func(lines []logLine) bool {
		for _, l := range lines {
			if l.t.Before(since) {
				continue
			}
			b := l.b
			if timestamps {
				b = append([]byte(l.t.UTC().Format(time.RFC3339Nano)+" "), b...)
			}
			if limited && sent+int64(len(b)) > limit {
				b = b[:limit-sent]
			}
			n, err := w.Write(b)
			sent += int64(n)
			if err != nil || (limited && sent >= limit) {
				return false
			}
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	if !send(lines) || !follow {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-podDone:
			more, _ := s.snapshot(key, next)
			send(more)
			return
		case <-changed:
			var more []logLine
			more, changed = s.snapshot(key, next)
			next += len(more)
			if !send(more) {
				return
			}
		}
	}
}

// watchPodEnd closes done when the pod is deleted or its phase is final.
func (s *kubeletServer) watchPodEnd(ctx context.Context, ns, pod string, done chan struct{}) {
	defer close(done)
	for ctx.Err() == nil {
		p, err := s.client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil || podFinished(p) {
			return
		}
		wi, err := s.client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", pod).String(),
			ResourceVersion: p.ResourceVersion,
		})
		if err != nil {
			return
		}
		for ev := range wi.ResultChan() {
			if ev.Type == watch.Deleted {
				wi.Stop()
				return
			}
			if p, ok := ev.Object.(*corev1.Pod); ok && podFinished(p) {
				wi.Stop()
				return
			}
		}
		wi.Stop() // the watch ended (timeout): look again
	}
}

func podFinished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// Log returns a writer whose writes become the container's log, served to
// pods/log (each line stamped with the time of its write). For a pod the
// test runs, point the process's stdout and stderr at it.
func (k *Kubelet) Log(namespace, pod, container string) io.Writer {
	return logWriter{s: k.logs, key: namespace + "/" + pod + "/" + container}
}

type logWriter struct {
	s   *kubeletServer
	key string
}

func (w logWriter) Write(p []byte) (int, error) {
	if w.s == nil {
		return 0, errors.New("kubetest: the cluster has no kubelet log server")
	}
	w.s.write(w.key, p)
	return len(p), nil
}
