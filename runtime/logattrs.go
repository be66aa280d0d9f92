package runtime

import (
	"log/slog"
	"strings"
)

// Log attributes are the same everywhere so one query finds every line
// about a thing: "endpoint", "worker", "container" (short id), "pod", "job".

// wlog is the logger for lines about one worker: its endpoint, worker id
// and container id (once it has one).
func (s *Supervisor) wlog(ws *workerState) *slog.Logger {
	l := s.log.With("endpoint", ws.endpointID, "worker", ws.id)
	if ws.instanceID != "" {
		l = l.With("container", shortID(ws.instanceID))
	}
	return l
}

func (s *Supervisor) scaled(endpointID, action string) {
	if s.cfg.OnScale != nil {
		s.cfg.OnScale(endpointID, action)
	}
}

// shortID is how an instance is named in log lines: a Docker container id
// cut to 12 characters, as the docker CLI shows it; other ids (Pod names)
// whole.
func shortID(id string) string {
	if len(id) == 64 && strings.Trim(id, "0123456789abcdef") == "" {
		return id[:12]
	}
	return id
}
