package mgmt

import (
	"context"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"berth/store"
)

// The account's settings. Berth has one account (the API key's holder);
// its settings live in the meta bucket.

const userSettingsKey = "user_settings"

// maxPubKey bounds the pubKey setting (several SSH keys, one per line).
const maxPubKey = 64 << 10

// UserSettings are the account's settings.
type UserSettings struct {
	// PubKey holds the operator's SSH public keys, one per line, as
	// RunPod keeps them (runpodctl ssh add-key edits it).
	PubKey string `json:"pubKey"`
}

// UserSettingsInput changes settings; nil fields are not given.
type UserSettingsInput struct {
	PubKey *string
}

// UserSettings reads the settings (zero when never set).
func (s *Service) UserSettings(_ context.Context) (UserSettings, error) {
	var u UserSettings
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		raw := tx.GetRaw(store.Meta, userSettingsKey)
		if raw == nil {
			return nil
		}
		return json.Unmarshal(raw, &u)
	})
	return u, err
}

// UpdateUserSettings validates in and stores it.
func (s *Service) UpdateUserSettings(_ context.Context, in UserSettingsInput) (UserSettings, error) {
	if in.PubKey != nil {
		k := *in.PubKey
		switch {
		case len(k) > maxPubKey:
			return UserSettings{}, invalid("pubKey", "pubKey must be at most %d bytes", maxPubKey)
		case !utf8.ValidString(k) || strings.ContainsRune(k, 0):
			return UserSettings{}, invalid("pubKey", "pubKey must be text (SSH public keys, one per line)")
		}
	}
	var u UserSettings
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if raw := tx.GetRaw(store.Meta, userSettingsKey); raw != nil {
			if err := json.Unmarshal(raw, &u); err != nil {
				return err
			}
		}
		if in.PubKey != nil {
			u.PubKey = *in.PubKey
		}
		return tx.Apply(store.Put(store.Meta, userSettingsKey, u))
	})
	return u, err
}
