package httpapi

import (
	"encoding/json"
	"net/http"

	"berth/queue"
)

// statusReason is the "reason" an EndpointStatus value says (as served in
// the endpoint's status object), "" when it has none.
func statusReason(st any) string {
	if st == nil {
		return ""
	}
	b, err := json.Marshal(st)
	if err != nil {
		return ""
	}
	var v struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(b, &v)
	return v.Reason
}

// healthView is /health: RunPod's counts, plus why work is held back when
// the runtime says so (clients ignore unknown fields).
type healthView struct {
	queue.Health
	Reason string `json:"reason,omitempty"`
}

// healthWithReason is GET /v2/{endpointId}/health: healthRoute's answer
// with the runtime's reason added when it gives one.
func (s *Server) healthWithReason(w http.ResponseWriter, r *http.Request) {
	if s.cfg.EndpointStatus == nil {
		s.healthRoute(w, r)
		return
	}
	id := endpointOf(r).ID
	writeJSON(w, http.StatusOK, healthView{Health: s.health(id), Reason: statusReason(s.cfg.EndpointStatus(id))})
}
