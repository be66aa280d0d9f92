package app

import (
	"encoding/json"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"berth/hfcache"
	"berth/mgmt"
	"berth/store"
)

// Models configures the model cache (docs/models.md): endpoints' Hugging
// Face models, downloaded once into DataDir/models/hub and mounted
// read-only into their workers.
type Models struct {
	// Endpoint is the Hub's base URL [hfcache.DefaultEndpoint].
	Endpoint string
	// Token is sent as Bearer to Endpoint (gated and private models) when
	// none is stored through the API (mgmt.SetHFToken), which wins.
	Token string
	// MaxBytes caps the cache (0: no cap); Slots bounds the files
	// downloading at once [4]; BytesPerSecond the rate (0: unbounded).
	MaxBytes       int64
	Slots          int
	BytesPerSecond int64
	// MinBackoff is the first wait after a failed download [2s] (tests
	// shorten it).
	MinBackoff time.Duration
}

// modelSync keeps the cache's wanted models equal to what the endpoints
// name: once a second, and at once when an endpoint changes.
type modelSync struct {
	cache     modelCache
	endpoints func() ([]store.Endpoint, error)
	log       *slog.Logger
	kickCh    chan struct{}
	done      chan struct{}
	wg        sync.WaitGroup
}

// modelCache is where models are downloaded: hfcache.Cache (Docker: the
// data folder) or kube.Models (Kubernetes: Jobs filling a claim).
type modelCache interface {
	Sync(refs []hfcache.Ref)
	Status(ref hfcache.Ref) (hfcache.Progress, bool)
	Touch(ref hfcache.Ref)
	RetryNow()
}

// newModelSync follows the endpoints' models into cache.
func (a *App) newModelSync(cache modelCache, log *slog.Logger) {
	a.models = &modelSync{cache: cache, log: log, kickCh: make(chan struct{}, 1), done: make(chan struct{})}
	a.models.endpoints = a.listEndpoints
}

// hfToken is the token models are downloaded with: the stored one, else
// the environment's.
func (a *App) hfToken() string {
	if t := a.mg.HFToken(); t != "" {
		return t
	}
	return a.cfg.Models.Token
}

// newModels opens the model cache and returns its folder.
func (a *App) newModels(log *slog.Logger) (string, error) {
	m := a.cfg.Models
	cache, err := hfcache.New(hfcache.Config{
		Dir: filepath.Join(a.cfg.DataDir, "models", "hub"), Endpoint: m.Endpoint,
		Token: a.hfToken, MaxBytes: m.MaxBytes, Slots: m.Slots, BytesPerSecond: m.BytesPerSecond,
		MinBackoff: m.MinBackoff, Logger: log,
	})
	if err != nil {
		return "", err
	}
	a.newModelSync(cache, log)
	a.closers = append(a.closers, cache.Close)
	return cache.Dir(), nil
}

// listEndpoints reads every endpoint record.
func (a *App) listEndpoints() ([]store.Endpoint, error) {
	var out []store.Endpoint
	err := a.db.Scan(store.Endpoints, func(_ string, raw []byte) error {
		var e store.Endpoint
		if err := json.Unmarshal(raw, &e); err != nil {
			return err
		}
		out = append(out, e)
		return nil
	})
	return out, err
}

func (m *modelSync) start() {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			m.sync()
			select {
			case <-m.done:
				return
			case <-t.C:
			case <-m.kickCh:
			}
		}
	}()
}

func (m *modelSync) stop() {
	close(m.done)
	m.wg.Wait()
}

func (m *modelSync) kick() {
	select {
	case m.kickCh <- struct{}{}:
	default:
	}
}

// sync makes the cache want every model an endpoint names; the models in
// use are marked used (eviction takes the least recently used first).
func (m *modelSync) sync() {
	eps, err := m.endpoints()
	if err != nil {
		m.log.Warn("model cache: list endpoints", "err", err)
		return
	}
	var refs []hfcache.Ref
	for _, e := range eps {
		for _, s := range e.ModelReferences {
			if r, err := hfcache.ParseRef(s); err == nil {
				refs = append(refs, r)
			}
		}
	}
	m.cache.Sync(refs)
	for _, r := range refs {
		if p, ok := m.cache.Status(r); ok && p.State == hfcache.Ready {
			m.cache.Touch(r)
		}
	}
}

// wait is the runtime's Models: "" when ep's models are complete, else the
// progress of the first one that is not.
func (m *modelSync) wait(ep store.Endpoint) string {
	for _, s := range ep.ModelReferences {
		r, err := hfcache.ParseRef(s)
		if err != nil {
			return "modelReferences: " + err.Error()
		}
		p, ok := m.cache.Status(r)
		if !ok {
			m.kick() // named since the last sync
			return hfcache.Progress{Ref: r, State: hfcache.Pending}.String()
		}
		if p.State != hfcache.Ready {
			return p.String()
		}
	}
	return ""
}

// statuses is ep's models as the surfaces show them (nil: it names none).
func (m *modelSync) statuses(ep store.Endpoint) []mgmt.ModelStatus {
	var out []mgmt.ModelStatus
	for _, s := range ep.ModelReferences {
		r, err := hfcache.ParseRef(s)
		if err != nil {
			continue // refused when stored: not reachable
		}
		p, ok := m.cache.Status(r)
		if !ok {
			p = hfcache.Progress{Ref: r, State: hfcache.Pending}
		}
		out = append(out, mgmt.ViewModel(s, p))
	}
	return out
}

// hfTokenChanged: downloads that failed (a 401 without a token) try again
// now with the new one.
func (a *App) hfTokenChanged() {
	if a.models != nil {
		a.models.cache.RetryNow()
	}
}
