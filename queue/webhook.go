package queue

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"

	"berth/store"
)

// The webhook outbox: an entry is written in the same transaction as the
// job's terminal state, delivered by a small pool of goroutines, retried
// WebhookRetryDelay apart, and deleted once delivered or out of attempts.
// Nothing here runs on the job path: scheduling never blocks.

type hookQueue struct {
	mu      sync.Mutex
	pending []*store.OutboxEntry
	signal  chan struct{}
}

func (s *Service) hookQ() *hookQueue { return &s.hq }

// scheduleHook queues a delivery for its NextAt; it never blocks.
func (s *Service) scheduleHook(h *store.OutboxEntry) {
	if d := h.NextAt.Sub(s.clock.Now()); d > 0 {
		s.clock.AfterFunc(d, func() { s.readyHook(h) })
		return
	}
	s.readyHook(h)
}

func (s *Service) readyHook(h *store.OutboxEntry) {
	q := s.hookQ()
	q.mu.Lock()
	q.pending = append(q.pending, h)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (s *Service) webhookLoop() {
	defer s.wg.Done()
	q := s.hookQ()
	for {
		q.mu.Lock()
		var h *store.OutboxEntry
		if len(q.pending) > 0 {
			h = q.pending[0]
			q.pending = q.pending[1:]
		}
		more := len(q.pending) > 0
		q.mu.Unlock()
		if more {
			select {
			case q.signal <- struct{}{}:
			default:
			}
		}
		if h == nil {
			select {
			case <-q.signal:
				continue
			case <-s.stopCh:
				return
			}
		}
		s.deliver(h)
	}
}

func (s *Service) deliver(h *store.OutboxEntry) {
	h.Attempts++
	err := s.post(h)
	if err == nil {
		s.webhookResult(h, "delivered")
		s.st.WriteAsync(store.Delete(store.Outbox, h.ID))
		return
	}
	if h.Attempts >= s.cfg.WebhookAttempts {
		s.webhookResult(h, "failed")
		s.log().Warn("webhook not delivered; giving up", "endpoint", h.EndpointID, "job", h.JobID, "url", h.URL, "attempts", h.Attempts, "err", err)
		s.st.WriteAsync(store.Delete(store.Outbox, h.ID))
		return
	}
	s.webhookResult(h, "retry")
	s.log().Info("webhook failed; will retry", "endpoint", h.EndpointID, "job", h.JobID, "url", h.URL, "attempt", h.Attempts, "err", err)
	h.NextAt = s.clock.Now().Add(s.cfg.WebhookRetryDelay)
	s.st.WriteAsync(store.Put(store.Outbox, h.ID, h))
	select {
	case <-s.stopCh:
		return
	default:
	}
	s.scheduleHook(h)
}

func (s *Service) post(h *store.OutboxEntry) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(h.Body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Berth-Webhook/1")
	resp, err := s.cfg.WebhookClient.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("receiver answered %d", resp.StatusCode)
	}
	return nil
}

func (s *Service) webhookResult(h *store.OutboxEntry, result string) {
	if s.cfg.OnWebhook != nil {
		s.cfg.OnWebhook(h.EndpointID, result)
	}
}
