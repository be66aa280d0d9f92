package runtime

import (
	"context"
	"fmt"
)

// WorkerNet is where a worker's own HTTP server can be reached
// (load-balancing endpoints): its address and the environment it was
// started with (PORT, PORT_HEALTH, HEALTH_CHECK_PATH).
type WorkerNet struct {
	ContainerID string // the worker's instance on the backend
	IP          string
	Env         map[string]string
}

// WorkerNet inspects the instance of worker workerID. It fails while the
// instance is not created yet or has no address.
func (s *Supervisor) WorkerNet(ctx context.Context, workerID string) (WorkerNet, error) {
	s.mu.Lock()
	ws := s.workers[workerID]
	var id string
	if ws != nil && ws.state != wsExited {
		id = ws.instanceID
	}
	s.mu.Unlock()
	if id == "" {
		return WorkerNet{}, fmt.Errorf("worker %s has no container yet", workerID)
	}
	in, err := s.b.Inspect(ctx, id)
	if err != nil {
		return WorkerNet{}, fmt.Errorf("inspect worker %s: %w", workerID, err)
	}
	out := WorkerNet{ContainerID: id, IP: in.IP, Env: in.Env}
	if out.Env == nil {
		out.Env = map[string]string{}
	}
	if out.IP == "" {
		return out, fmt.Errorf("worker %s has no network address", workerID)
	}
	return out, nil
}
