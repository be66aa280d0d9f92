// Command lbworker is the load-balancing test worker: its own HTTP server,
// as a user's FastAPI app would be, on PORT (default 80), with the health
// check on HEALTH_CHECK_PATH (default /ping) answering 204 (initializing)
// for LBWORKER_INIT_MS after start, then 200. Routes:
//
//	GET  /ping                   health: 204, 200 or 503 (see /health/…)
//	POST /health/{state}         healthy, initializing or unhealthy from now on
//	ANY  /echo…                  {"worker", "method", "path", "query", "body", "authorization"}
//	GET  /slow?ms=N              answers after N ms
//	GET  /stream?n=N&ms=M        N server-sent events, M ms apart, each flushed
//	GET  /crash                  the process exits mid-request
//	GET  /big?bytes=N            N bytes of "x"
//	GET  /ws                     WebSocket echo
//
// "worker" is RUNPOD_POD_ID, the worker id Berth gives the container.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "80"
	}
	healthPath := os.Getenv("HEALTH_CHECK_PATH")
	if healthPath == "" {
		healthPath = "/ping"
	}
	initMS, _ := strconv.Atoi(os.Getenv("LBWORKER_INIT_MS"))
	start := time.Now()
	var forced atomic.Value // "" or a state set by /health/{state}
	forced.Store("")
	me := os.Getenv("RUNPOD_POD_ID")

	mux := http.NewServeMux()
	mux.HandleFunc("GET "+healthPath, func(w http.ResponseWriter, r *http.Request) {
		switch forced.Load().(string) {
		case "unhealthy":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "initializing":
			w.WriteHeader(http.StatusNoContent)
		case "healthy":
			w.WriteHeader(http.StatusOK)
		default:
			if time.Since(start) < time.Duration(initMS)*time.Millisecond {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			w.WriteHeader(http.StatusOK)
		}
	})
	mux.HandleFunc("POST /health/{state}", func(w http.ResponseWriter, r *http.Request) {
		forced.Store(r.PathValue("state"))
		fmt.Fprintln(w, "ok")
	})
	echo := func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"worker": me, "method": r.Method, "path": r.URL.Path,
			"query": r.URL.RawQuery, "body": string(b), "authorization": r.Header.Get("Authorization")})
	}
	mux.HandleFunc("/echo", echo)
	mux.HandleFunc("/echo/", echo)
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		fmt.Fprintln(w, "slow done", me)
	})
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i := range n {
			fmt.Fprintf(w, "data: %d\n\n", i)
			f.Flush()
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
	})
	mux.HandleFunc("GET /crash", func(w http.ResponseWriter, r *http.Request) {
		os.Exit(3)
	})
	mux.HandleFunc("GET /big", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("bytes"))
		buf := []byte(strings.Repeat("x", 1<<20))
		for n > 0 {
			k := min(n, len(buf))
			if _, err := w.Write(buf[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte(me+": "), msg...)); err != nil {
				return
			}
		}
	})
	if err := http.ListenAndServe(":"+port, mux); err != nil {
		fmt.Fprintln(os.Stderr, "lbworker:", err)
		os.Exit(1)
	}
}
