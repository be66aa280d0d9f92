package hfcache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// DefaultEndpoint is the Hub's base URL.
const DefaultEndpoint = "https://huggingface.co"

// Config sets up a Cache.
type Config struct {
	// Dir is the hub cache folder (what HF_HUB_CACHE names); created.
	Dir string
	// Endpoint is the Hub's base URL (a mirror, a test server); default
	// DefaultEndpoint.
	Endpoint string
	// Token returns the Hugging Face token sent as Bearer to the Endpoint
	// (gated and private models); nil or "": none.
	Token func() string
	// Slots bounds the files downloading at once, over all models
	// (default 4).
	Slots int
	// BytesPerSecond bounds the download rate over all models; 0: unbounded.
	BytesPerSecond int64
	// MaxBytes caps the cache's size on disk; 0: no cap. Models no wanted
	// reference names are evicted, least recently used first, to make room.
	MaxBytes int64
	// MaxFiles bounds the files of one model (default 10000).
	MaxFiles int
	// MinBackoff and MaxBackoff bound the wait before a failed download is
	// tried again (default 2 s and 5 min; doubling in between).
	MinBackoff, MaxBackoff time.Duration
	// StallTimeout: a transfer that receives nothing this long is abandoned
	// (and resumed on the next attempt); default 2 min.
	StallTimeout time.Duration
	// Client makes the requests (default: one with connection timeouts).
	Client *http.Client
	Logger *slog.Logger
	Now    func() time.Time
}

// State is where a model's download is.
type State string

// The states of a wanted model.
const (
	Pending     State = "pending"     // not yet looked up
	Downloading State = "downloading" // transferring
	Failed      State = "failed"      // the last attempt failed; retried after RetryAt
	Ready       State = "ready"       // complete: workers may start
)

// Progress is a wanted model's download state.
type Progress struct {
	Ref    Ref
	State  State
	Commit string // known once the revision was looked up
	// Done and Total are bytes (Total 0 until the revision was looked up).
	Done, Total int64
	Error       string // Failed: the reason
	Attempts    int    // failed attempts so far
	RetryAt     time.Time
}

// String is the one sentence every surface shows for a model not ready:
// "downloading Qwen/Qwen2.5-0.5B-Instruct: 312 MB of 988 MB".
func (p Progress) String() string {
	switch p.State {
	case Ready:
		return p.Ref.Short() + " is ready"
	case Downloading:
		if p.Total > 0 {
			return fmt.Sprintf("downloading %s: %s", p.Ref.Short(), byteRange(p.Done, p.Total))
		}
		return "downloading " + p.Ref.Short()
	case Failed:
		return fmt.Sprintf("downloading %s failed (attempt %d, tried again at %s): %s", p.Ref.Short(), p.Attempts,
			p.RetryAt.UTC().Format("15:04:05Z"), p.Error)
	default:
		if p.Error != "" { // why it waits (Kubernetes: its download Job's Pod)
			return "waiting to download " + p.Ref.Short() + ": " + p.Error
		}
		return "waiting to download " + p.Ref.Short()
	}
}

// byteRange writes "312 MB of 988 MB" (decimal units, as the Hub shows
// sizes), both in the unit of the total.
func byteRange(done, total int64) string {
	unit, div := "bytes", int64(1)
	switch {
	case total >= 1e9:
		unit, div = "GB", 1e9
		return fmt.Sprintf("%.1f %s of %.1f %s", float64(done)/float64(div), unit, float64(total)/float64(div), unit)
	case total >= 1e6:
		unit, div = "MB", 1e6
	case total >= 1e3:
		unit, div = "kB", 1e3
	}
	return fmt.Sprintf("%d %s of %d %s", done/div, unit, total/div, unit)
}

// Cache downloads and keeps the wanted models.
type Cache struct {
	cfg    Config
	log    *slog.Logger
	client *http.Client
	sem    chan struct{}
	lim    *rate.Limiter // nil: unbounded

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	models map[Ref]*model // the wanted models
	closed bool
	retry  chan struct{} // closed (and replaced) by RetryNow

	roomMu sync.Mutex // one admission (evict, reserve) at a time
	repoMu keyedMutex // one download per repository folder at a time
}

type model struct {
	ref    Ref
	cancel context.CancelFunc
	done   atomic.Int64
	p      Progress // under Cache.mu (Done is read from done)
}

// New opens (creates) the cache folder.
func New(cfg Config) (*Cache, error) {
	if cfg.Dir == "" {
		return nil, errors.New("hfcache: no folder")
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("model cache: %w", err)
	}
	if cfg.Endpoint == "" {
		cfg.Endpoint = DefaultEndpoint
	}
	cfg.Endpoint = strings.TrimRight(cfg.Endpoint, "/")
	if cfg.Slots <= 0 {
		cfg.Slots = 4
	}
	if cfg.MaxFiles <= 0 {
		cfg.MaxFiles = 10000
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 2 * time.Second
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(5*time.Minute, cfg.MinBackoff)
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = 2 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Cache{cfg: cfg, log: cfg.Logger.With("component", "models"), sem: make(chan struct{}, cfg.Slots),
		models: map[Ref]*model{}, retry: make(chan struct{})}
	base := cfg.Client
	if base == nil {
		base = &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment,
			ResponseHeaderTimeout: time.Minute, TLSHandshakeTimeout: 30 * time.Second, MaxIdleConnsPerHost: cfg.Slots}}
	}
	cl := *base
	// Redirects are followed by hand: the first answer's headers (commit,
	// linked ETag) matter, and the token goes to the Hub only.
	cl.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.client = &cl
	if cfg.BytesPerSecond > 0 {
		c.lim = rate.NewLimiter(rate.Limit(cfg.BytesPerSecond), int(max(cfg.BytesPerSecond, copyBuf)))
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

// Dir is the hub cache folder.
func (c *Cache) Dir() string { return c.cfg.Dir }

// Close stops every download (partial files stay, resumed by the next
// Cache on the folder) and waits for them.
func (c *Cache) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
}

// Sync makes refs the wanted models: each one not complete on disk starts
// downloading, a download no longer wanted stops (its partial files stay
// until evicted), and the cache is trimmed to its cap.
func (c *Cache) Sync(refs []Ref) {
	want := map[Ref]bool{}
	for _, r := range refs {
		want[r] = true
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	for r, m := range c.models {
		if !want[r] {
			m.cancel()
			delete(c.models, r)
		}
	}
	for r := range want {
		if c.models[r] != nil {
			continue
		}
		m := &model{ref: r, p: Progress{Ref: r, State: Pending}}
		if commit, ok := c.readyCommit(r); ok {
			m.p.State, m.p.Commit = Ready, commit
			m.cancel = func() {}
			c.models[r] = m
			continue
		}
		ctx, cancel := context.WithCancel(c.ctx)
		m.cancel = cancel
		c.models[r] = m
		c.wg.Add(1)
		go c.run(ctx, m)
	}
	c.mu.Unlock()
	if c.cfg.MaxBytes > 0 {
		c.roomMu.Lock()
		_, _ = c.makeRoomLocked(0, nil)
		c.roomMu.Unlock()
	}
}

// RetryNow makes the failed downloads waiting for their next attempt try
// again now (the token changed: a 401 may have become a success).
func (c *Cache) RetryNow() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.retry)
	c.retry = make(chan struct{})
}

// Status is ref's progress; ok is false when ref is not wanted.
func (c *Cache) Status(ref Ref) (Progress, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.models[ref]
	if m == nil {
		return Progress{}, false
	}
	p := m.p
	if p.State != Ready {
		p.Done = m.done.Load()
	} else {
		p.Done = p.Total
	}
	return p, true
}

// Touch records that ref was used now (a worker started with it): the
// least recently used models are evicted first.
func (c *Cache) Touch(ref Ref) {
	now := c.cfg.Now()
	_ = os.Chtimes(filepath.Join(c.cfg.Dir, ref.folder()), now, now)
}

func (c *Cache) set(m *model, f func(p *Progress)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(&m.p)
}

// run downloads m until it is complete, trying again after failures with a
// doubling back-off, until it is no longer wanted.
func (c *Cache) run(ctx context.Context, m *model) {
	defer c.wg.Done()
	delay := c.cfg.MinBackoff
	for attempt := 1; ; attempt++ {
		commit, err := c.fetch(ctx, m)
		if err == nil {
			c.set(m, func(p *Progress) { p.State, p.Commit, p.Error = Ready, commit, "" })
			c.log.Info("model ready", "model", m.ref.String(), "commit", commit, "bytes", m.done.Load())
			return
		}
		if ctx.Err() != nil {
			return
		}
		at := c.cfg.Now().Add(delay)
		var retry <-chan struct{}
		c.set(m, func(p *Progress) { p.State, p.Error, p.Attempts, p.RetryAt = Failed, err.Error(), attempt, at })
		c.mu.Lock()
		retry = c.retry
		c.mu.Unlock()
		c.log.Warn("model download failed", "model", m.ref.String(), "attempt", attempt, "retry_in", delay, "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-retry:
			t.Stop()
		case <-t.C:
		}
		delay = min(2*delay, c.cfg.MaxBackoff)
	}
}

// readyCommit is the commit ref names when its snapshot is complete on
// disk: snapshots/COMMIT only appears once every file is in place, and
// refs/REV is written after it.
func (c *Cache) readyCommit(ref Ref) (string, bool) {
	repo := filepath.Join(c.cfg.Dir, ref.folder())
	commit := ref.Revision
	if !ref.IsCommit() {
		b, err := os.ReadFile(filepath.Join(repo, "refs", filepath.FromSlash(ref.Revision)))
		if err != nil || !commitRE.MatchString(strings.TrimSpace(string(b))) {
			return "", false
		}
		commit = strings.TrimSpace(string(b))
	}
	if st, err := os.Stat(filepath.Join(repo, "snapshots", commit)); err != nil || !st.IsDir() {
		return "", false
	}
	return commit, true
}

// repoUsage is one repository folder of the cache.
type repoUsage struct {
	folder string
	bytes  int64
	used   time.Time
}

// usage lists the repository folders with their size (blobs, partial
// files included) and last use.
func (c *Cache) usage() ([]repoUsage, int64, error) {
	ents, err := os.ReadDir(c.cfg.Dir)
	if err != nil {
		return nil, 0, fmt.Errorf("model cache: %w", err)
	}
	var out []repoUsage
	var total int64
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "models--") {
			continue
		}
		u := repoUsage{folder: e.Name()}
		if st, err := os.Stat(filepath.Join(c.cfg.Dir, e.Name())); err == nil {
			u.used = st.ModTime()
		}
		blobs, _ := os.ReadDir(filepath.Join(c.cfg.Dir, e.Name(), "blobs"))
		for _, b := range blobs {
			if info, err := b.Info(); err == nil && info.Mode().IsRegular() {
				u.bytes += info.Size()
			}
		}
		total += u.bytes
		out = append(out, u)
	}
	return out, total, nil
}

// reserved is what downloads in flight still need, other than skip's.
func (c *Cache) reserved(skip *model) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, m := range c.models {
		if m != skip && m.p.State == Downloading && m.p.Total > 0 {
			n += max(0, m.p.Total-m.done.Load())
		}
	}
	return n
}

// makeRoomLocked evicts models no wanted reference names, least recently
// used first, until need more bytes fit under the cap; it returns the
// folders evicted and an error when they cannot fit. roomMu is held.
func (c *Cache) makeRoomLocked(need int64, self *model) ([]string, error) {
	if c.cfg.MaxBytes <= 0 {
		return nil, nil
	}
	repos, total, err := c.usage()
	if err != nil {
		return nil, err
	}
	wanted := map[string]bool{}
	c.mu.Lock()
	for r := range c.models {
		wanted[r.folder()] = true
	}
	c.mu.Unlock()
	total += c.reserved(self)
	var candidates []repoUsage
	for _, r := range repos {
		if !wanted[r.folder] {
			candidates = append(candidates, r)
		}
	}
	sort.Slice(candidates, func(i, j int) bool { return candidates[i].used.Before(candidates[j].used) })
	var evicted []string
	for _, r := range candidates {
		if total+need <= c.cfg.MaxBytes {
			break
		}
		if err := c.evict(r.folder); err != nil {
			return evicted, err
		}
		c.log.Info("model evicted", "folder", r.folder, "bytes", r.bytes, "last_used", r.used)
		evicted = append(evicted, r.folder)
		total -= r.bytes
	}
	if total+need > c.cfg.MaxBytes {
		return evicted, fmt.Errorf("the model cache's cap (%s) is too small: %s more are needed and %s are held by models endpoints name or are downloading",
			human(c.cfg.MaxBytes), human(need), human(total))
	}
	return evicted, nil
}

// evict removes a repository folder: renamed out of the layout first, so
// no reader sees it half removed.
func (c *Cache) evict(folder string) error {
	trash := filepath.Join(c.cfg.Dir, ".evicted-"+folder)
	if err := os.Rename(filepath.Join(c.cfg.Dir, folder), trash); err != nil {
		return fmt.Errorf("evict %s: %w", folder, err)
	}
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("evict %s: %w", folder, err)
	}
	return nil
}

func human(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%d kB", n/1e3)
	}
	return fmt.Sprintf("%d bytes", n)
}

// keyedMutex is a mutex per key, forgotten when nobody holds or waits.
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*keyedEntry
}

type keyedEntry struct {
	ch   chan struct{} // 1-buffered: the lock
	refs int
}

func (k *keyedMutex) lock(ctx context.Context, key string) (unlock func(), err error) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyedEntry{}
	}
	e := k.m[key]
	if e == nil {
		e = &keyedEntry{ch: make(chan struct{}, 1)}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()
	release := func() {
		k.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
	select {
	case e.ch <- struct{}{}:
		return func() { <-e.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}
