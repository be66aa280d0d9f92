package runtime

import "log/slog"

// Log attributes are the same everywhere so one query finds every line
// about a thing: "endpoint", "worker", "container" (short id), "pod", "job".

// wlog is the logger for lines about one worker: its endpoint, worker id
// and container id (once it has one).
func (s *Supervisor) wlog(ws *workerState) *slog.Logger {
	l := s.log.With("endpoint", ws.endpointID, "worker", ws.id)
	if ws.containerID != "" {
		l = l.With("container", shortID(ws.containerID))
	}
	return l
}

func (s *Supervisor) scaled(endpointID, action string) {
	if s.cfg.OnScale != nil {
		s.cfg.OnScale(endpointID, action)
	}
}
