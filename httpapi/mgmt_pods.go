package httpapi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"berth/queue"
	"berth/store"
)

// Pods: records, validation and desiredStatus transitions. The containers
// come from a PodRuntime (Config.Pods).
//
// The record is what the operator asked for. desiredStatus changes only
// when the runtime carried the action out; when it cannot (no runtime, no
// free GPU, a failed pull) the call answers an error and the record's
// statusMessage and lastStatusChange say why. A PATCH that needs a new
// container is stored and then applied with a reset.

// PodRuntime runs pod containers; the runtime package implements it.
// Calls get the request's context without its cancellation: the runtime
// bounds its own calls.
type PodRuntime interface {
	// StartPod starts the pod's container, creating it when missing or
	// when it was made for another pod.Version. It returns once the
	// container runs.
	StartPod(ctx context.Context, pod store.Pod) (PodState, error)
	// StopPod stops the container and keeps it (its container disk stays
	// until a reset); GPUs are released. Stopping a stopped pod is no error.
	StopPod(ctx context.Context, podID string) error
	// ResetPod replaces the container with a new one made from pod (the
	// container disk is wiped, the pod volume kept) and starts it.
	ResetPod(ctx context.Context, pod store.Pod) (PodState, error)
	// RemovePod removes the container and the pod volume. Removing a pod
	// without a container is no error.
	RemovePod(ctx context.Context, podID string) error
}

// PodState is what the runtime observed when a pod's container started.
type PodState struct {
	GPU          *store.PodGPU  // nil for CPU pods
	MemoryInGb   float64        // memory limit, 0 when unlimited
	PortMappings map[string]int // container port → host port
	PublicIP     string         // address the mapped ports are reachable on
	MachineID    string         // host name; "" keeps the record's
	StartedAt    time.Time      // zero: now
}

// Errors a PodRuntime wraps to choose the answer's status; any other
// runtime error is 503.
var (
	ErrNoRuntime   = errors.New("no container runtime: Docker is not reachable")
	ErrPodCapacity = errors.New("not enough free GPUs for the pod")      // 409
	ErrPodInvalid  = errors.New("the pod's container cannot be created") // 400, e.g. no such image
)

// runtimeErr is a failed runtime action.
type runtimeErr struct {
	action, pod string
	err         error
}

func (e runtimeErr) Error() string { return fmt.Sprintf("%s pod %s: %v", e.action, e.pod, e.err) }
func (e runtimeErr) Unwrap() error { return e.err }

// runtimeStatus maps a runtime failure to its HTTP status.
func runtimeStatus(err error) (int, bool) {
	switch {
	case errors.Is(err, ErrPodCapacity):
		return http.StatusConflict, true
	case errors.Is(err, ErrPodInvalid):
		return http.StatusBadRequest, true
	case errors.Is(err, ErrNoRuntime):
		return http.StatusServiceUnavailable, true
	}
	var re runtimeErr
	if errors.As(err, &re) {
		return http.StatusServiceUnavailable, true
	}
	return 0, false
}

// podLocks serialises actions on one pod across requests.
var podLocks keyedMutex

// runtimeCtx keeps the request's values but not its cancellation: a client
// that goes away must not leave a half-started container unrecorded.
func runtimeCtx(r *http.Request) context.Context { return context.WithoutCancel(r.Context()) }

func (s *Server) now() time.Time { return s.cfg.Clock.Now().UTC() }

func statusLine(what string, at time.Time) string {
	return what + ": " + at.Format(time.RFC3339)
}

// applyState records what the runtime observed at a start.
func (s *Server) applyState(p *store.Pod, st PodState) {
	p.GPU, p.MemoryInGb, p.PortMappings, p.PublicIP = st.GPU, st.MemoryInGb, st.PortMappings, st.PublicIP
	if st.MachineID != "" {
		p.MachineID = st.MachineID
	}
	p.LastStartedAt = st.StartedAt.UTC()
	if st.StartedAt.IsZero() {
		p.LastStartedAt = s.now()
	}
}

func (s *Server) createPod(w http.ResponseWriter, r *http.Request) {
	var in PodInput
	if !decodeBody(w, r, &in) {
		return
	}
	p := newPodDefaults()
	p.ID = queue.NewID(14)
	p.CreatedAt = s.now()
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		if in.TemplateID != nil && *in.TemplateID != "" {
			var t store.Template
			if tx.Get(store.Templates, *in.TemplateID, &t) != nil {
				return bad("templateId %q does not exist", *in.TemplateID)
			}
			fromTemplate(&p, t)
			if in.Env != nil {
				merged := maps.Clone(p.Env)
				maps.Copy(merged, in.Env)
				in.Env = merged
			}
		}
		if err := applyPodCreate(&p, in); err != nil {
			return err
		}
		if p.ImageName == "" {
			return bad("imageName is required (or a templateId whose image to run)")
		}
		return checkPodRefs(tx, &p)
	})
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	if s.cfg.Pods == nil {
		s.mgmtErr(w, r, runtimeErr{"create", p.ID, fmt.Errorf("%w; the pod was not created", ErrNoRuntime)})
		return
	}
	unlock := podLocks.lock(p.ID)
	defer unlock()
	// Stored first so the runtime (and a restart) can see it; removed
	// again when it cannot start, so a failed create leaves nothing.
	p.LastStatusChange = statusLine("Created by user", p.CreatedAt)
	err = s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := checkPodRefs(tx, &p); err != nil {
			return err
		}
		return tx.Apply(store.Put(store.Pods, p.ID, p))
	})
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	ctx := runtimeCtx(r)
	st, err := s.cfg.Pods.StartPod(ctx, p)
	if err != nil {
		if rerr := s.cfg.Pods.RemovePod(ctx, p.ID); rerr != nil {
			s.cfg.Logger.Error("remove pod that failed to start", "pod", p.ID, "err", rerr)
		}
		if derr := s.cfg.Store.Update(func(tx *store.Tx) error { return tx.Apply(store.Delete(store.Pods, p.ID)) }); derr != nil {
			s.cfg.Logger.Error("drop pod that failed to start", "pod", p.ID, "err", derr)
		}
		s.mgmtErr(w, r, runtimeErr{"create", p.ID, fmt.Errorf("%w; the pod was not created", err)})
		return
	}
	err = store.UpdatePod(s.cfg.Store, p.ID, func(rec *store.Pod) error {
		s.applyState(rec, st)
		rec.DesiredStatus = store.PodRunning
		p = *rec
		return nil
	})
	if err != nil {
		s.internal(w, r, err)
		return
	}
	s.writePod(w, r, http.StatusCreated, p, nil)
}

// savePod re-reads the pod and applies fn, so concurrent runtime updates
// of other fields are kept.
func (s *Server) savePod(id string, fn func(*store.Pod)) (store.Pod, error) {
	var out store.Pod
	err := store.UpdatePod(s.cfg.Store, id, func(p *store.Pod) error {
		fn(p)
		out = *p
		return nil
	})
	return out, err
}

// podFailed records why an action did not take effect and answers its error.
func (s *Server) podFailed(w http.ResponseWriter, r *http.Request, id, action string, err error) {
	err = runtimeErr{action, id, err}
	at := s.now()
	if _, serr := s.savePod(id, func(p *store.Pod) {
		p.StatusMessage = err.Error()
		p.LastStatusChange = statusLine(strings.ToUpper(action[:1])+action[1:]+" failed", at)
	}); serr != nil {
		s.cfg.Logger.Error("record pod failure", "pod", id, "err", serr)
	}
	s.mgmtErr(w, r, err)
}

// podAction is POST /pods/{podId}/start|stop|reset|restart.
func (s *Server) podAction(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := mux.Vars(r)["podId"]
		unlock := podLocks.lock(id)
		defer unlock()
		p, err := s.loadPod(id)
		if err != nil {
			s.mgmtErr(w, r, err)
			return
		}
		if p.Locked && action != "start" {
			writeErr(w, r, http.StatusConflict, fmt.Sprintf("pod %s is locked: unlock it (PATCH {\"locked\": false}) to %s it", id, action))
			return
		}
		rt := s.cfg.Pods
		if rt == nil {
			s.podFailed(w, r, id, action, ErrNoRuntime)
			return
		}
		ctx := runtimeCtx(r)
		var st PodState
		switch action {
		case "start":
			st, err = rt.StartPod(ctx, p)
		case "stop":
			err = rt.StopPod(ctx, id)
		case "reset":
			st, err = rt.ResetPod(ctx, p)
		case "restart":
			if err = rt.StopPod(ctx, id); err == nil {
				if st, err = rt.StartPod(ctx, p); err != nil {
					// The container is stopped now; the record says so.
					if _, serr := s.savePod(id, func(p *store.Pod) { p.DesiredStatus = store.PodExited; p.PortMappings, p.PublicIP = nil, "" }); serr != nil {
						s.cfg.Logger.Error("record stopped pod", "pod", id, "err", serr)
					}
				}
			}
		}
		if err != nil {
			s.podFailed(w, r, id, action, err)
			return
		}
		at := s.now()
		p, err = s.savePod(id, func(p *store.Pod) {
			p.StatusMessage = ""
			if action == "stop" {
				p.DesiredStatus = store.PodExited
				p.PortMappings, p.PublicIP = nil, ""
				p.LastStatusChange = statusLine("Stopped by user", at)
				return
			}
			s.applyState(p, st)
			p.DesiredStatus = store.PodRunning
			p.LastStatusChange = statusLine(map[string]string{"start": "Started", "reset": "Reset", "restart": "Restarted"}[action]+" by user", at)
		})
		if err != nil {
			s.internal(w, r, err)
			return
		}
		s.writePod(w, r, http.StatusOK, p, nil)
	}
}

// updatePod is PATCH and POST …/update (PodUpdateInput). A change to what
// the container runs bumps the pod's version and, on a running pod, resets
// it.
func (s *Server) updatePod(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["podId"]
	var in PodUpdateInput
	if !decodeBody(w, r, &in) {
		return
	}
	unlock := podLocks.lock(id)
	defer unlock()
	var p store.Pod
	var reset bool
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := getOr404(tx, store.Pods, id, "pod", &p); err != nil {
			return err
		}
		before := p
		if err := applyPodFields(&p, in.podFields); err != nil {
			return err
		}
		if err := checkPodRefs(tx, &p); err != nil {
			return err
		}
		if podRolls(before, p) {
			p.Version++
			reset = p.DesiredStatus == store.PodRunning
			if reset && before.Locked && p.Locked {
				return conflict("pod %s is locked: this change needs a reset; unlock it first (\"locked\": false)", id)
			}
		}
		return tx.Apply(store.Put(store.Pods, id, p))
	})
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	if reset {
		if s.cfg.Pods == nil {
			s.podFailed(w, r, id, "reset", fmt.Errorf("%w; the change is stored and applies when the pod is next reset or started", ErrNoRuntime))
			return
		}
		st, err := s.cfg.Pods.ResetPod(runtimeCtx(r), p)
		if err != nil {
			s.podFailed(w, r, id, "reset", fmt.Errorf("%w; the change is stored and applies when the pod is next reset or started", err))
			return
		}
		at := s.now()
		if p, err = s.savePod(id, func(p *store.Pod) {
			s.applyState(p, st)
			p.StatusMessage = ""
			p.LastStatusChange = statusLine("Reset by update", at)
		}); err != nil {
			s.internal(w, r, err)
			return
		}
	}
	s.writePod(w, r, http.StatusOK, p, nil)
}

// deletePod terminates a pod: its container and pod volume are removed and
// the record with them. Without a runtime the record is removed and the
// runtime's reconcile removes the container as an orphan.
func (s *Server) deletePod(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["podId"]
	unlock := podLocks.lock(id)
	defer unlock()
	p, err := s.loadPod(id)
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	if p.Locked {
		writeErr(w, r, http.StatusConflict, fmt.Sprintf("pod %s is locked: unlock it (PATCH {\"locked\": false}) to delete it", id))
		return
	}
	if s.cfg.Pods != nil {
		if err := s.cfg.Pods.RemovePod(runtimeCtx(r), id); err != nil {
			s.podFailed(w, r, id, "delete", err)
			return
		}
	}
	if err := s.cfg.Store.Update(func(tx *store.Tx) error { return tx.Apply(store.Delete(store.Pods, id)) }); err != nil {
		s.internal(w, r, err)
		return
	}
	noContent(w)
}
