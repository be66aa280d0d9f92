// Package mgmt holds Berth's management rules — validation, defaults and
// the lifecycle of templates, endpoints, pods, network volumes and registry
// auths, and billing — free of any transport. REST v1, REST v2 and GraphQL
// are adapters: they translate their shapes into the inputs here and the
// *Error kinds into their statuses.
package mgmt

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"berth/store"
)

// Config holds a Service's dependencies.
type Config struct {
	Store  *store.DB
	Clock  clockwork.Clock // default: the real clock
	Logger *slog.Logger    // default: slog.Default()
	// DataDir holds prices.json; default: the database file's
	// directory.
	DataDir string
	// Pods runs pod containers. Optional: without it pods cannot be
	// created or started (Unavailable) and the records say why.
	Pods PodRuntime
	// EndpointChanged is told of an endpoint created or changed (its
	// version may have been bumped). Optional.
	EndpointChanged func(endpointID string)
	// EndpointDeleted is told after an endpoint's record is deleted and
	// its jobs cancelled: its workers must be stopped. Optional.
	EndpointDeleted func(endpointID string)
	// Volumes keeps the network volumes' data (the runtime's). Optional:
	// without it volumes are records only.
	Volumes Volumes
	// RegistryAuthDeleted is told after a registry credential's record is
	// deleted, for what the runtime keeps of it (a Kubernetes pull
	// Secret: the credential must not outlive its deletion); its error is
	// logged. Optional.
	RegistryAuthDeleted func(ctx context.Context, authID string) error
	// HFTokenChanged is told after the Hugging Face token was stored or
	// cleared (the model cache tries failed downloads again). Optional.
	HFTokenChanged func()
	// Jobs cancels a deleted endpoint's unfinished jobs (the queue).
	// Optional: without it an endpoint's jobs are left as they are.
	Jobs EndpointJobs
}

// EndpointJobs is what mgmt needs of the queue: queue.Service implements it.
type EndpointJobs interface {
	// CancelEndpoint cancels every unfinished job of the endpoint.
	CancelEndpoint(endpointID string) (int, error)
}

// Service applies the management rules to the store. Safe for concurrent
// use.
type Service struct {
	cfg      Config
	podLocks keyedMutex
	keys     keyring // keys.go
}

// New returns a Service.
func New(cfg Config) *Service {
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DataDir == "" && cfg.Store != nil {
		cfg.DataDir = filepath.Dir(cfg.Store.Path())
	}
	return &Service{cfg: cfg}
}

// DataDir is where prices.json lives.
func (s *Service) DataDir() string { return s.cfg.DataDir }

func (s *Service) now() time.Time { return s.cfg.Clock.Now().UTC() }

func (s *Service) changed(id string) {
	if s.cfg.EndpointChanged != nil {
		s.cfg.EndpointChanged(id)
	}
}

// all decodes every record of bucket.
func all[T any](tx *store.Tx, bucket string) ([]T, error) {
	var out []T
	err := tx.ForEach(bucket, func(key string, raw []byte) error {
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("decode %s %q: %w", bucket, key, err)
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

// byCreated sorts records oldest first, ties by id, so lists are stable.
func byCreated[T any](list []T, created func(T) time.Time, id func(T) string) {
	slices.SortFunc(list, func(a, b T) int {
		if c := created(a).Compare(created(b)); c != 0 {
			return c
		}
		return cmp.Compare(id(a), id(b))
	})
}

// getOr404 reads a record, turning a missing one into NotFound naming it.
func getOr404(tx *store.Tx, bucket, id, what string, v any) error {
	if tx.GetRaw(bucket, id) == nil {
		return notFoundID(what, id)
	}
	return tx.Get(bucket, id, v)
}

// ByID maps records by id (for includes).
func ByID[T any](list []T, id func(T) string) map[string]T {
	m := make(map[string]T, len(list))
	for _, v := range list {
		m[id(v)] = v
	}
	return m
}

// keyedMutex serialises actions on one id (a pod's start and delete, say)
// without holding a lock across ids.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

func (k *keyedMutex) lock(id string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedEntry{}
	}
	e := k.locks[id]
	if e == nil {
		e = &keyedEntry{}
		k.locks[id] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.locks, id)
		}
		k.mu.Unlock()
	}
}

// noCancel keeps ctx's values but not its cancellation: a client that goes
// away must not leave a half-started container unrecorded.
func noCancel(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }
