package mgmt

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"berth/queue"
	"berth/store"
)

// API keys, as RunPod's console makes them: a name and a permission level
// — All, Read Only, or Restricted with a per-endpoint None / Read /
// Read-Write — shown once, stored as a SHA-256 hash, enabled or disabled.
// The rules of who may do what are Access's; the transports map their
// routes and fields to a Scope and ask.

// Levels and grants, as stored and as the APIs spell them.
const (
	LevelAll        = "ALL"
	LevelReadOnly   = "READ_ONLY"
	LevelRestricted = "RESTRICTED"

	GrantRead      = "READ"
	GrantReadWrite = "READ_WRITE"
)

// Bounds of the key set: keys (each held in memory by the keyring), the
// endpoints one Restricted key names, and the audit trail's entries.
var (
	LimitKeys      = Limit{"keys", 0, 1000, "entries", ""}
	LimitKeyGrants = Limit{"endpoints", 0, 1000, "entries", ""}
)

// AuditMax is how many audit entries are kept; older ones are deleted in
// the transaction that adds a new one.
const AuditMax = 10000

// lastUsedEvery is how often a key's last use is written: at most once
// per key a minute, in one transaction for every key used since.
const lastUsedEvery = time.Minute

// Principal is who a request is: an API key's name and permissions.
type Principal struct {
	KeyID  string // "" for BERTH_API_KEY (not stored)
	Name   string
	Level  string
	Grants map[string]string // RESTRICTED: endpoint id → READ | READ_WRITE
}

// Scope is what a route or field reaches.
type Scope int

const (
	// ScopePublic needs no key (documents, the dashboard's static page).
	ScopePublic Scope = iota + 1
	// ScopeWorker is the worker protocol: a worker's own key or an All key.
	ScopeWorker
	// ScopeEndpoint is one endpoint, named by the route.
	ScopeEndpoint
	// ScopeEndpointList is the list of endpoints: any key, filtered to the
	// ones it may see (Visible).
	ScopeEndpointList
	// ScopeAccount is everything account-wide: templates, pods, volumes,
	// registries, billing, GPUs, /metrics.
	ScopeAccount
	// ScopeAdmin is key management, the audit trail and backups (which
	// hold every key's hash and every credential): All keys only.
	ScopeAdmin
	// ScopeFields is GraphQL: any key; each field and mutation is checked.
	ScopeFields
)

// Need is what a request does: read, or change something.
type Need int

const (
	Read Need = iota + 1
	Write
)

func levelText(l string) string {
	switch l {
	case LevelAll:
		return "All"
	case LevelReadOnly:
		return "Read Only"
	case LevelRestricted:
		return "Restricted"
	}
	return l
}

func forbidden(format string, a ...any) error { return newErr(Forbidden, "", format, a...) }

// Access decides whether p may do need on scope (endpointID for the
// endpoint scope): nil, or a Forbidden error naming the key and what it
// lacks. what names the action for the message ("POST /v1/pods").
func Access(p *Principal, scope Scope, endpointID string, need Need, what string) error {
	if scope == ScopePublic {
		return nil
	}
	if p == nil {
		return forbidden("no API key")
	}
	if p.Level == LevelAll {
		return nil
	}
	who := fmt.Sprintf("key %s is %s", quote(p.Name), levelText(p.Level))
	switch scope {
	case ScopeWorker:
		return forbidden("%s: the worker routes take the worker's own key or an All key (%s)", who, what)
	case ScopeAdmin:
		return forbidden("%s: key management, the audit trail and backups need an All key (%s)", who, what)
	case ScopeFields, ScopeEndpointList:
		if need == Read {
			return nil
		}
	}
	if p.Level == LevelReadOnly {
		if need == Read {
			return nil
		}
		return forbidden("%s: it reads and never writes (%s)", who, what)
	}
	// Restricted.
	switch scope {
	case ScopeEndpoint:
		switch g := p.Grants[endpointID]; {
		case g == GrantReadWrite:
			return nil
		case g == GrantRead && need == Read:
			return nil
		case g == GrantRead:
			return forbidden("%s with Read on endpoint %s: it cannot change it nor run jobs (%s needs Read-Write)", who, ShortID(endpointID), what)
		default:
			return forbidden("%s and has no access to endpoint %s (%s)", who, ShortID(endpointID), what)
		}
	case ScopeEndpointList:
		return forbidden("%s: creating endpoints is account-wide (%s)", who, what)
	}
	return forbidden("%s: it reaches only the endpoints it is granted, nothing account-wide (%s)", who, what)
}

// Visible reports whether p may see endpointID in a list.
func Visible(p *Principal, endpointID string) bool {
	return p != nil && (p.Level != LevelRestricted || p.Grants[endpointID] != "")
}

// CanWriteAny reports whether p may change anything at all (a Read Only
// or a Restricted key without Read-Write grants may not).
func (p *Principal) CanWriteAny() bool {
	if p == nil || p.Level == LevelReadOnly {
		return false
	}
	if p.Level == LevelAll {
		return true
	}
	for _, g := range p.Grants {
		if g == GrantReadWrite {
			return true
		}
	}
	return false
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p; PrincipalFrom reads it back (nil
// when there is none).
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom is the request's principal, or nil.
func PrincipalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// ---- the keyring ----

// keyring maps key hashes to principals in memory (at most LimitKeys.Max
// + 1 entries), reloaded from the store on every key change, and gathers
// last-use times to write them at most once a minute.
type keyring struct {
	mu      sync.RWMutex
	byHash  map[[32]byte]*ringEntry
	loaded  bool
	envHash []byte // BERTH_API_KEY's hash, an All key not stored

	usedMu    sync.Mutex
	used      map[string]time.Time // key id → last use not yet written
	lastWrite time.Time
	writing   atomic.Bool
	// flushes is the background write in flight; stopped: StopKeyUses
	// ran, so no write starts after the store may be closed.
	flushes sync.WaitGroup
	stopped bool // under usedMu
}

type ringEntry struct {
	hash     [32]byte
	p        *Principal
	disabled bool
}

// ErrNoKey, ErrUnknownKey and ErrKeyDisabled are Authenticate's refusals
// (401).
var (
	ErrNoKey       = &Error{Kind: Invalid, Msg: "missing API key: send Authorization: Bearer <key>"}
	ErrUnknownKey  = &Error{Kind: Invalid, Msg: "invalid API key"}
	ErrKeyDisabled = &Error{Kind: Invalid, Msg: "API key is disabled"}
)

// HashKey is the stored form of an API key: its SHA-256 in hex.
func HashKey(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// SetupKeys prepares the keyring: envHash (BERTH_API_KEY's hash, "" when
// unset) is an All key named "BERTH_API_KEY"; operatorHash (the key
// generated on first start, "" when none) becomes the stored All key
// "operator" when no key holds it yet.
func (s *Service) SetupKeys(envHash, operatorHash string) error {
	if envHash != "" {
		b, err := hex.DecodeString(envHash)
		if err != nil || len(b) != sha256.Size {
			return fmt.Errorf("BERTH_API_KEY hash %q is not a SHA-256 hash", envHash)
		}
		s.keys.mu.Lock()
		s.keys.envHash = b
		s.keys.mu.Unlock()
	}
	if operatorHash != "" {
		err := s.cfg.Store.Update(func(tx *store.Tx) error {
			keys, err := all[store.APIKey](tx, store.APIKeys)
			if err != nil {
				return err
			}
			// The Meta hash goes once migrated: a migrated key deleted
			// later does not come back on the next start.
			if err := tx.Apply(store.Delete(store.Meta, "api_key_hash")); err != nil {
				return err
			}
			for _, k := range keys {
				if k.Hash == operatorHash {
					return nil
				}
			}
			k := store.APIKey{ID: queue.NewID(10), Name: "operator", Prefix: "berth_", Hash: operatorHash,
				Level: LevelAll, CreatedAt: s.now(), Operator: true}
			return tx.Apply(store.Put(store.APIKeys, k.ID, k))
		})
		if err != nil {
			return fmt.Errorf("migrate the operator key: %w", err)
		}
	}
	return s.reloadKeys()
}

// reloadKeys rebuilds the hash → principal map from the store.
func (s *Service) reloadKeys() error {
	var keys []store.APIKey
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		keys, err = all[store.APIKey](tx, store.APIKeys)
		return err
	})
	if err != nil {
		return fmt.Errorf("load the API keys: %w", err)
	}
	m := make(map[[32]byte]*ringEntry, len(keys))
	for _, k := range keys {
		b, err := hex.DecodeString(k.Hash)
		if err != nil || len(b) != sha256.Size {
			s.cfg.Logger.Error("API key with a damaged hash is ignored", "key", k.ID)
			continue
		}
		var h [32]byte
		copy(h[:], b)
		m[h] = &ringEntry{hash: h, disabled: k.Disabled,
			p: &Principal{KeyID: k.ID, Name: k.Name, Level: k.Level, Grants: k.Grants}}
	}
	s.keys.mu.Lock()
	s.keys.byHash, s.keys.loaded = m, true
	s.keys.mu.Unlock()
	return nil
}

// HasKeys reports whether any key can authenticate (BERTH_API_KEY or a
// stored key).
func (s *Service) HasKeys() bool {
	s.keys.mu.RLock()
	defer s.keys.mu.RUnlock()
	return len(s.keys.envHash) > 0 || len(s.keys.byHash) > 0
}

// Authenticate returns the principal of secret, or ErrNoKey,
// ErrUnknownKey or ErrKeyDisabled. The secret's SHA-256 is looked up (a
// hash table reveals nothing of the secret's bytes) and compared in
// constant time. A use is noted for the key's lastUsed.
func (s *Service) Authenticate(secret string) (*Principal, error) {
	if secret == "" {
		return nil, ErrNoKey
	}
	sum := sha256.Sum256([]byte(secret))
	s.keys.mu.RLock()
	if !s.keys.loaded {
		s.keys.mu.RUnlock()
		if err := s.reloadKeys(); err != nil {
			return nil, err
		}
		s.keys.mu.RLock()
	}
	env := len(s.keys.envHash) == sha256.Size && subtle.ConstantTimeCompare(sum[:], s.keys.envHash) == 1
	e := s.keys.byHash[sum]
	s.keys.mu.RUnlock()
	if env {
		return &Principal{Name: "BERTH_API_KEY", Level: LevelAll}, nil
	}
	if e == nil || subtle.ConstantTimeCompare(sum[:], e.hash[:]) != 1 {
		return nil, ErrUnknownKey
	}
	if e.disabled {
		return nil, ErrKeyDisabled
	}
	s.noteUse(e.p.KeyID)
	return e.p, nil
}

// noteUse records a key's use in memory; once a minute the uses gathered
// are written in one transaction, off the request's goroutine.
func (s *Service) noteUse(id string) {
	now := s.now()
	k := &s.keys
	k.usedMu.Lock()
	if k.used == nil {
		k.used = map[string]time.Time{}
	}
	k.used[id] = now
	due := now.Sub(k.lastWrite) >= lastUsedEvery && !k.stopped
	if due && k.writing.CompareAndSwap(false, true) {
		k.flushes.Add(1) // under usedMu: StopKeyUses waits for it
		go func() {
			defer k.flushes.Done()
			defer k.writing.Store(false)
			s.FlushKeyUses()
		}()
	}
	k.usedMu.Unlock()
}

// StopKeyUses writes the key uses not yet written, after the background
// write in flight, and starts no other: called when Berth stops, before
// the store closes (app.Stop).
func (s *Service) StopKeyUses() {
	k := &s.keys
	k.usedMu.Lock()
	k.stopped = true
	k.usedMu.Unlock()
	k.flushes.Wait()
	s.FlushKeyUses()
}

// FlushKeyUses writes the key uses gathered since the last write.
func (s *Service) FlushKeyUses() {
	k := &s.keys
	k.usedMu.Lock()
	used := k.used
	k.used = nil
	k.lastWrite = s.now()
	k.usedMu.Unlock()
	if len(used) == 0 {
		return
	}
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		for id, t := range used {
			var rec store.APIKey
			if tx.GetRaw(store.APIKeys, id) == nil {
				continue // deleted since
			}
			if err := tx.Get(store.APIKeys, id, &rec); err != nil {
				return err
			}
			if t.After(rec.LastUsed) {
				rec.LastUsed = t
				if err := tx.Apply(store.Put(store.APIKeys, id, rec)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		s.cfg.Logger.Warn("could not record API keys' last use", "err", err)
	}
}

// ---- key management ----

// KeyInput creates or edits a key; nil fields are left as they are (an
// edit) or take their defaults (a create: Level is required).
type KeyInput struct {
	Name     *string
	Level    *string
	Grants   map[string]string // replaces the grants when not nil
	Disabled *bool
}

// KeyView is a key as every surface lists it: never its secret nor hash.
type KeyView struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Prefix    string            `json:"prefix"`
	Level     string            `json:"permission"`
	Grants    map[string]string `json:"endpoints,omitempty"`
	Enabled   bool              `json:"enabled"`
	CreatedAt time.Time         `json:"createdAt"`
	LastUsed  *time.Time        `json:"lastUsed"`
	Operator  bool              `json:"operator,omitempty"`
}

func keyView(k store.APIKey) KeyView {
	v := KeyView{ID: k.ID, Name: k.Name, Prefix: k.Prefix, Level: k.Level, Grants: k.Grants, Enabled: !k.Disabled,
		CreatedAt: k.CreatedAt, Operator: k.Operator}
	if !k.LastUsed.IsZero() {
		t := k.LastUsed
		v.LastUsed = &t
	}
	return v
}

// NormLevel reads a permission level as the APIs accept it: ALL,
// READ_ONLY, RESTRICTED in any case, "-" or " " for "_".
func NormLevel(s string) (string, bool) {
	u := strings.ToUpper(strings.NewReplacer("-", "_", " ", "_").Replace(strings.TrimSpace(s)))
	switch u {
	case LevelAll, LevelReadOnly, LevelRestricted:
		return u, true
	case "READONLY":
		return LevelReadOnly, true
	}
	return "", false
}

// NormGrant reads an endpoint grant: READ, READ_WRITE (or "rw"); NONE
// and "" remove the endpoint.
func NormGrant(s string) (string, bool) {
	u := strings.ToUpper(strings.NewReplacer("-", "_", " ", "_").Replace(strings.TrimSpace(s)))
	switch u {
	case GrantRead, GrantReadWrite:
		return u, true
	case "READWRITE", "RW":
		return GrantReadWrite, true
	case "NONE", "":
		return "", true
	}
	return "", false
}

func (s *Service) checkKey(tx *store.Tx, k *store.APIKey, in KeyInput) error {
	if in.Name != nil {
		if err := checkName(*in.Name); err != nil {
			return err
		}
		k.Name = strings.TrimSpace(*in.Name)
	}
	if in.Level != nil {
		l, ok := NormLevel(*in.Level)
		if !ok {
			return invalid("permission", "permission must be ALL, READ_ONLY or RESTRICTED, got %s", quote(ClipMessage(*in.Level)))
		}
		k.Level = l
	}
	if in.Grants != nil {
		if err := LimitKeyGrants.CheckCount("endpoints", len(in.Grants)); err != nil {
			return err
		}
		g := map[string]string{}
		for id, v := range in.Grants {
			if err := LimitID.CheckLen("endpoints", id); err != nil {
				return err
			}
			if err := CheckText("endpoints", id, false); err != nil {
				return err
			}
			n, ok := NormGrant(v)
			if !ok {
				return invalid("endpoints", "endpoints.%s must be NONE, READ or READ_WRITE, got %s", ClipMessage(id), quote(ClipMessage(v)))
			}
			if n == "" {
				continue
			}
			if tx.GetRaw(store.Endpoints, id) == nil {
				return missing("endpoints", id)
			}
			g[id] = n
		}
		k.Grants = g
	}
	if in.Disabled != nil {
		k.Disabled = *in.Disabled
	}
	if k.Level != LevelRestricted {
		k.Grants = nil
	}
	if k.Operator && (k.Disabled || k.Level != LevelAll) && !s.otherAllKey(tx, k.ID) {
		return conflict("key %s is the last enabled All key: disabling or lowering it would lock key management out", quote(k.Name))
	}
	return nil
}

// otherAllKey reports whether an enabled All key other than id exists, or
// BERTH_API_KEY is set.
func (s *Service) otherAllKey(tx *store.Tx, id string) bool {
	s.keys.mu.RLock()
	env := len(s.keys.envHash) > 0
	s.keys.mu.RUnlock()
	if env {
		return true
	}
	found := false
	tx.ForEach(store.APIKeys, func(key string, raw []byte) error {
		if key == id {
			return nil
		}
		var k store.APIKey
		if json.Unmarshal(raw, &k) == nil && k.Level == LevelAll && !k.Disabled {
			found = true
		}
		return nil
	})
	return found
}

// NewSecret makes a key's secret: "rpa_" and 32 base32 characters (160
// random bits), in the style of RunPod's keys.
func NewSecret() (string, error) {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate a key: %w", err)
	}
	return "rpa_" + base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b), nil
}

// CreateKey makes a key; its secret is returned only here.
func (s *Service) CreateKey(ctx context.Context, in KeyInput) (KeyView, string, error) {
	if err := live(ctx); err != nil {
		return KeyView{}, "", err
	}
	if in.Name == nil {
		return KeyView{}, "", invalid("name", "name is required")
	}
	if in.Level == nil {
		return KeyView{}, "", invalid("permission", "permission is required (ALL, READ_ONLY or RESTRICTED)")
	}
	if in.Disabled == nil {
		f := false
		in.Disabled = &f
	}
	secret, err := NewSecret()
	if err != nil {
		return KeyView{}, "", err
	}
	k := store.APIKey{ID: queue.NewID(10), Prefix: secret[:8], Hash: HashKey(secret), CreatedAt: s.now()}
	err = s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := s.checkKey(tx, &k, in); err != nil {
			return err
		}
		n := 0
		if err := tx.ForEachKey(store.APIKeys, func(string) error { n++; return nil }); err != nil {
			return err
		}
		if n >= int(LimitKeys.Max) {
			return conflict("Berth keeps at most %d API keys: delete one first", LimitKeys.Max)
		}
		return tx.Apply(store.Put(store.APIKeys, k.ID, k))
	})
	if err != nil {
		return KeyView{}, "", err
	}
	return keyView(k), secret, s.reloadKeys()
}

// Keys lists the keys, oldest first.
func (s *Service) Keys(ctx context.Context) ([]KeyView, error) {
	if err := live(ctx); err != nil {
		return nil, err
	}
	var keys []store.APIKey
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		keys, err = all[store.APIKey](tx, store.APIKeys)
		return err
	})
	byCreated(keys, func(k store.APIKey) time.Time { return k.CreatedAt }, func(k store.APIKey) string { return k.ID })
	out := make([]KeyView, 0, len(keys))
	for _, k := range keys {
		out = append(out, keyView(k))
	}
	return out, err
}

// findKey reads a key by id, or by name when no id matches.
func findKey(tx *store.Tx, ref string) (store.APIKey, error) {
	var k store.APIKey
	if tx.GetRaw(store.APIKeys, ref) != nil {
		return k, tx.Get(store.APIKeys, ref, &k)
	}
	keys, err := all[store.APIKey](tx, store.APIKeys)
	if err != nil {
		return k, err
	}
	var hits []store.APIKey
	for _, c := range keys {
		if c.Name == ref {
			hits = append(hits, c)
		}
	}
	switch len(hits) {
	case 1:
		return hits[0], nil
	case 0:
		return k, notFoundID("API key", ref)
	}
	return k, invalid("id", "%d keys are named %s: name one by its id", len(hits), quote(ref))
}

// Key returns one key by id or name.
func (s *Service) Key(ctx context.Context, ref string) (KeyView, error) {
	if err := live(ctx); err != nil {
		return KeyView{}, err
	}
	var k store.APIKey
	err := s.cfg.Store.View(func(tx *store.Tx) error { var err error; k, err = findKey(tx, ref); return err })
	return keyView(k), err
}

// UpdateKey edits a key's name, level, grants or state.
func (s *Service) UpdateKey(ctx context.Context, ref string, in KeyInput) (KeyView, error) {
	if err := live(ctx); err != nil {
		return KeyView{}, err
	}
	var k store.APIKey
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		var err error
		if k, err = findKey(tx, ref); err != nil {
			return err
		}
		if err := s.checkKey(tx, &k, in); err != nil {
			return err
		}
		return tx.Apply(store.Put(store.APIKeys, k.ID, k))
	})
	if err != nil {
		return KeyView{}, err
	}
	return keyView(k), s.reloadKeys()
}

// DeleteKey deletes a key: its next request is refused (401).
func (s *Service) DeleteKey(ctx context.Context, ref string) (KeyView, error) {
	if err := live(ctx); err != nil {
		return KeyView{}, err
	}
	var k store.APIKey
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		var err error
		if k, err = findKey(tx, ref); err != nil {
			return err
		}
		if k.Level == LevelAll && !k.Disabled && !s.otherAllKey(tx, k.ID) {
			return conflict("key %s is the last enabled All key: deleting it would lock key management out", quote(k.Name))
		}
		return tx.Apply(store.Delete(store.APIKeys, k.ID))
	})
	if err != nil {
		return KeyView{}, err
	}
	return keyView(k), s.reloadKeys()
}

// forgetEndpointGrants drops a deleted endpoint from every key's grants.
func forgetEndpointGrants(tx *store.Tx, endpointID string) error {
	keys, err := all[store.APIKey](tx, store.APIKeys)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if _, ok := k.Grants[endpointID]; ok {
			delete(k.Grants, endpointID)
			if err := tx.Apply(store.Put(store.APIKeys, k.ID, k)); err != nil {
				return err
			}
		}
	}
	return nil
}

// ---- the audit trail ----

// Audit records one management write or key change; the trail keeps the
// newest AuditMax entries. A failure is logged, not returned: the write
// it records is done.
func (s *Service) Audit(e store.AuditEntry) {
	if e.Time.IsZero() {
		e.Time = s.now()
	}
	e.Action = ClipMessage(e.Action)
	e.Object = ClipMessage(e.Object)
	e.Error = ClipMessage(e.Error)
	b := make([]byte, 4)
	rand.Read(b)
	key := fmt.Sprintf("%020d-%s", e.Time.UnixNano(), hex.EncodeToString(b))
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := tx.Apply(store.Put(store.Audit, key, e)); err != nil {
			return err
		}
		_, err := tx.Trim(store.Audit, AuditMax)
		return err
	})
	if err != nil {
		s.cfg.Logger.Error("could not record an audit entry", "action", e.Action, "key", e.Key, "err", err)
	}
}

// AuditLog returns up to limit entries, newest first.
func (s *Service) AuditLog(ctx context.Context, limit int) ([]store.AuditEntry, error) {
	if err := live(ctx); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > AuditMax {
		limit = AuditMax
	}
	var out []store.AuditEntry
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		out, err = all[store.AuditEntry](tx, store.Audit)
		return err
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.After(out[j].Time) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, err
}
