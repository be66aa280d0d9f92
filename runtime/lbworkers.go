package runtime

import (
	"context"
	"fmt"
	"strings"

	"github.com/moby/moby/client"
)

// WorkerNet is where a worker container's own HTTP server can be reached
// from the host (load-balancing endpoints): its bridge address and the
// environment it was started with (PORT, PORT_HEALTH, HEALTH_CHECK_PATH).
type WorkerNet struct {
	ContainerID string
	IP          string
	Env         map[string]string
}

// WorkerNet inspects the container of worker workerID. It fails while the
// container is not created yet or has no address.
func (s *Supervisor) WorkerNet(ctx context.Context, workerID string) (WorkerNet, error) {
	s.mu.Lock()
	ws := s.workers[workerID]
	var cid string
	if ws != nil && ws.state != wsExited {
		cid = ws.containerID
	}
	s.mu.Unlock()
	if cid == "" {
		return WorkerNet{}, fmt.Errorf("worker %s has no container yet", workerID)
	}
	res, err := s.d.cli.ContainerInspect(ctx, cid, client.ContainerInspectOptions{})
	if err != nil {
		return WorkerNet{}, fmt.Errorf("inspect worker %s: %w", workerID, err)
	}
	out := WorkerNet{ContainerID: cid, Env: map[string]string{}}
	c := res.Container
	if c.Config != nil {
		for _, kv := range c.Config.Env {
			if k, v, ok := strings.Cut(kv, "="); ok {
				out.Env[k] = v
			}
		}
	}
	if c.NetworkSettings != nil {
		for _, n := range c.NetworkSettings.Networks {
			if n != nil && n.IPAddress.IsValid() {
				out.IP = n.IPAddress.String()
				break
			}
		}
	}
	if out.IP == "" {
		return out, fmt.Errorf("worker %s has no network address", workerID)
	}
	return out, nil
}
