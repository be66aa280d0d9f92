package mgmt

import (
	"context"
	"strings"
	"time"

	"berth/store"
)

// The Hugging Face token the model cache sends to the Hub for gated and
// private models (docs/models.md). It is write-only: stored in the Meta
// bucket, given to the cache (HFToken), never in an answer; an answer says
// only whether one is set and since when.

const hfTokenKey = "hf_token"

type storedHFToken struct {
	Token     string    `json:"token"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// HFTokenInfo is what every answer shows of the token.
type HFTokenInfo struct {
	// Set: a token is stored through the API.
	Set       bool       `json:"set"`
	UpdatedAt *time.Time `json:"updatedAt,omitempty"`
}

// HFTokenInfo says whether a token is stored.
func (s *Service) HFTokenInfo(ctx context.Context) (HFTokenInfo, error) {
	if err := live(ctx); err != nil {
		return HFTokenInfo{}, err
	}
	t, err := s.hfToken()
	if err != nil || t.Token == "" {
		return HFTokenInfo{}, err
	}
	return viewHFToken(t), nil
}

func viewHFToken(t storedHFToken) HFTokenInfo {
	at := t.UpdatedAt
	return HFTokenInfo{Set: true, UpdatedAt: &at}
}

// SetHFToken stores the token (replacing any): printable ASCII without
// spaces, within LimitHFToken.
func (s *Service) SetHFToken(ctx context.Context, token *string) (HFTokenInfo, error) {
	if err := live(ctx); err != nil {
		return HFTokenInfo{}, err
	}
	if err := CheckHFToken(token); err != nil {
		return HFTokenInfo{}, err
	}
	t := storedHFToken{Token: *token, UpdatedAt: s.now()}
	if err := s.cfg.Store.Update(func(tx *store.Tx) error { return tx.Apply(store.Put(store.Meta, hfTokenKey, t)) }); err != nil {
		return HFTokenInfo{}, err
	}
	if s.cfg.HFTokenChanged != nil {
		s.cfg.HFTokenChanged()
	}
	return viewHFToken(t), nil
}

// CheckHFToken checks a token's input without storing anything.
func CheckHFToken(token *string) error {
	if token == nil || *token == "" {
		return invalid("token", "token is required (a Hugging Face access token, hf_…)")
	}
	if err := LimitHFToken.CheckLen("token", *token); err != nil {
		return err
	}
	if strings.ContainsFunc(*token, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return invalid("token", "token must be printable ASCII without spaces (a Hugging Face access token, hf_…)")
	}
	return nil
}

// ClearHFToken deletes the stored token.
func (s *Service) ClearHFToken(ctx context.Context) (HFTokenInfo, error) {
	if err := live(ctx); err != nil {
		return HFTokenInfo{}, err
	}
	if err := s.cfg.Store.Update(func(tx *store.Tx) error { return tx.Apply(store.Delete(store.Meta, hfTokenKey)) }); err != nil {
		return HFTokenInfo{}, err
	}
	if s.cfg.HFTokenChanged != nil {
		s.cfg.HFTokenChanged()
	}
	return HFTokenInfo{}, nil
}

// HFToken is the stored token, for the model cache only ("": none).
func (s *Service) HFToken() string {
	t, err := s.hfToken()
	if err != nil {
		s.cfg.Logger.Warn("the stored Hugging Face token cannot be read", "err", err)
		return ""
	}
	return t.Token
}

func (s *Service) hfToken() (storedHFToken, error) {
	var t storedHFToken
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		if tx.GetRaw(store.Meta, hfTokenKey) == nil {
			return nil
		}
		return tx.Get(store.Meta, hfTokenKey, &t)
	})
	return t, err
}
