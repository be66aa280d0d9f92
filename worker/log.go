package worker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
)

// JobIDKey is the slog attribute key that carries a job id. The handler made
// by [NewLogHandler] moves it into the line's request id, like runpod-python's
// logger does with its job_id argument.
const JobIDKey = "job_id"

// LevelTrace is runpod-python's TRACE level, below DEBUG.
const LevelTrace = slog.Level(-8)

// NewLogger returns a logger that writes lines like runpod-python's
// RunPodLogger: with RUNPOD_ENDPOINT_ID set, one JSON object per line,
// {"requestId": <job id|null>, "message": "...", "level": "INFO"}; otherwise
// "LEVEL  | [jobid | ]message". The level comes from RUNPOD_LOG_LEVEL (falling
// back to RUNPOD_DEBUG_LEVEL) and defaults to DEBUG, like the SDK. A nil env
// means os.Getenv and a nil w means os.Stdout.
func NewLogger(env func(string) string, w io.Writer) *slog.Logger {
	if env == nil {
		env = os.Getenv
	}
	if w == nil {
		w = os.Stdout
	}
	name := env("RUNPOD_LOG_LEVEL")
	if name == "" {
		name = env("RUNPOD_DEBUG_LEVEL")
	}
	return slog.New(NewLogHandler(w, env("RUNPOD_ENDPOINT_ID") != "", parseLevel(name)))
}

func parseLevel(s string) slog.Level {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "NOTSET", "TRACE":
		return LevelTrace
	case "INFO":
		return slog.LevelInfo
	case "WARN", "WARNING":
		return slog.LevelWarn
	case "ERROR":
		return slog.LevelError
	}
	return slog.LevelDebug
}

func levelName(l slog.Level) string {
	switch {
	case l < slog.LevelDebug:
		return "TRACE"
	case l < slog.LevelInfo:
		return "DEBUG"
	case l < slog.LevelWarn:
		return "INFO"
	case l < slog.LevelError:
		return "WARN"
	}
	return "ERROR"
}

// NewLogHandler returns an slog.Handler writing runpod-python style lines to
// w (JSON lines when jsonLines is true). Attributes other than [JobIDKey] are
// appended to the message as " key=value".
func NewLogHandler(w io.Writer, jsonLines bool, level slog.Leveler) slog.Handler {
	if level == nil {
		level = slog.LevelDebug
	}
	return &logHandler{mu: &sync.Mutex{}, w: w, json: jsonLines, level: level}
}

type logHandler struct {
	mu     *sync.Mutex
	w      io.Writer
	json   bool
	level  slog.Leveler
	attrs  []slog.Attr
	prefix string // group prefix
}

func (h *logHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level()
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h2 := *h
	h2.attrs = append(append([]slog.Attr(nil), h.attrs...), h.qualify(as)...)
	return &h2
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.prefix = h.prefix + name + "."
	return &h2
}

func (h *logHandler) qualify(as []slog.Attr) []slog.Attr {
	if h.prefix == "" {
		return as
	}
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		if a.Key != JobIDKey {
			a.Key = h.prefix + a.Key
		}
		out[i] = a
	}
	return out
}

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	var jobID string
	var msg strings.Builder
	msg.WriteString(r.Message)
	add := func(a slog.Attr) {
		if a.Key == JobIDKey {
			jobID = a.Value.String()
			return
		}
		if a.Equal(slog.Attr{}) {
			return
		}
		fmt.Fprintf(&msg, " %s=%v", a.Key, a.Value.Resolve())
	}
	for _, a := range h.attrs {
		add(a)
	}
	var rec []slog.Attr
	r.Attrs(func(a slog.Attr) bool { rec = append(rec, a); return true })
	for _, a := range h.qualify(rec) {
		add(a)
	}
	level := levelName(r.Level)
	var line []byte
	if h.json {
		var id any
		if jobID != "" {
			id = jobID
		}
		b, err := pyObject(true, kv{"requestId", id}, kv{"message", msg.String()}, kv{"level", level})
		if err != nil {
			return err
		}
		line = append(b, '\n')
	} else {
		s := fmt.Sprintf("%-7s| ", level)
		if jobID != "" {
			s += jobID + " | "
		}
		line = []byte(s + msg.String() + "\n")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := h.w.Write(line)
	return err
}
