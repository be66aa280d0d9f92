// Package logtest checks Berth's log attribute rules in tests: a line about
// a job names its endpoint and job, a line about a worker its endpoint and
// worker, and a line about a worker container that ran names the container.
package logtest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// mustHaveContainer are messages only logged once a worker's container
// exists.
var mustHaveContainer = map[string]bool{"worker exited": true, "worker stopped": true, "stop worker container": true}

// Check returns a logger writing to inner (nil: discarded) that fails t at
// cleanup if any line broke the rules, and the lines seen (for tests that
// look for a line).
func Check(t testing.TB, inner slog.Handler) (*slog.Logger, *Lines) {
	if inner == nil {
		inner = slog.DiscardHandler
	}
	l := &Lines{}
	t.Cleanup(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, v := range l.violations {
			t.Errorf("log rule broken: %s", v)
		}
	})
	return slog.New(&handler{inner: inner, lines: l}), l
}

// Lines are the records seen, as message plus attributes.
type Lines struct {
	mu         sync.Mutex
	all        []map[string]string
	at         []time.Time // when each of all was logged
	violations []string
	more       chan struct{} // closed (and replaced) at each new line
}

// Wait waits until n lines with message msg have been logged, or ctx ends:
// the event a test waits for when what it checks happens on another
// goroutine (a timer's callback) that logs it.
func (l *Lines) Wait(ctx context.Context, msg string, n int) error {
	for {
		l.mu.Lock()
		seen := 0
		for _, a := range l.all {
			if a["msg"] == msg {
				seen++
			}
		}
		if l.more == nil {
			l.more = make(chan struct{})
		}
		more := l.more
		l.mu.Unlock()
		if seen >= n {
			return nil
		}
		select {
		case <-more:
		case <-ctx.Done():
			return fmt.Errorf("%d of %d lines %q logged: %w", seen, n, msg, ctx.Err())
		}
	}
}

// Find returns the attributes of the first line with message msg.
func (l *Lines) Find(msg string) map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.all {
		if a["msg"] == msg {
			return a
		}
	}
	return nil
}

// Times returns when each line with message msg and attribute key=value
// was logged, in order: for tests that check how far apart things
// happened (a back-off) from the lines that report them.
func (l *Lines) Times(msg, key, value string) []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Time
	for i, a := range l.all {
		if a["msg"] == msg && a[key] == value {
			out = append(out, l.at[i])
		}
	}
	return out
}

type handler struct {
	inner slog.Handler
	attrs []slog.Attr
	lines *Lines
}

func (h *handler) Enabled(ctx context.Context, lv slog.Level) bool { return true }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	a := map[string]string{"msg": r.Message}
	for _, at := range h.attrs {
		a[at.Key] = at.Value.String()
	}
	r.Attrs(func(at slog.Attr) bool { a[at.Key] = at.Value.String(); return true })
	var broken []string
	if a["job"] != "" && a["endpoint"] == "" {
		broken = append(broken, "a job line without its endpoint")
	}
	if a["worker"] != "" && a["endpoint"] == "" {
		broken = append(broken, "a worker line without its endpoint")
	}
	if mustHaveContainer[r.Message] && a["container"] == "" {
		broken = append(broken, "a worker container line without its container id")
	}
	h.lines.mu.Lock()
	h.lines.all = append(h.lines.all, a)
	h.lines.at = append(h.lines.at, r.Time)
	if h.lines.more != nil {
		close(h.lines.more)
		h.lines.more = nil
	}
	if len(broken) > 0 {
		h.lines.violations = append(h.lines.violations, fmt.Sprintf("%s: %q %v", strings.Join(broken, ", "), r.Message, a))
	}
	h.lines.mu.Unlock()
	if h.inner.Enabled(ctx, r.Level) {
		return h.inner.Handle(ctx, r)
	}
	return nil
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &handler{inner: h.inner.WithAttrs(as), attrs: append(append([]slog.Attr{}, h.attrs...), as...), lines: h.lines}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{inner: h.inner.WithGroup(name), attrs: h.attrs, lines: h.lines}
}
