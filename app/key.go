package app

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"

	"berth/httpapi"
	"berth/store"
)

// apiKeyHash returns the hash of the operator's key: key when given (berth
// serve passes BERTH_API_KEY), otherwise the key generated on first start.
// A generated key is not stored nor shown here: keep, called by Start once
// Berth serves, stores its hash and shows it once on notice — so a start
// that fails (its port in use, a bad --apply file) does not use up the one
// showing, and the next start generates and shows a key. keep is nil when
// there is nothing to store.
func apiKeyHash(db *store.DB, key string, notice io.Writer, log *slog.Logger) (hash string, keep func() error, err error) {
	if key != "" {
		return httpapi.HashKey(key), nil, nil
	}
	var stored []byte
	db.View(func(tx *store.Tx) error { stored = tx.GetRaw(store.Meta, "api_key_hash"); return nil })
	if stored != nil {
		log.Info("using the API key generated on first start (set BERTH_API_KEY to use another)")
		return string(stored), nil, nil
	}
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		return "", nil, fmt.Errorf("generate the API key: %w", err)
	}
	key = "berth_" + hex.EncodeToString(b)
	h := httpapi.HashKey(key)
	keep = func() error {
		if err := db.Write(store.PutRaw(store.Meta, "api_key_hash", []byte(h))); err != nil {
			return fmt.Errorf("store the API key's hash: %w", err)
		}
		fmt.Fprintf(notice, "\nYour Berth API key (shown only this once; only its hash is stored):\n\n    %s\n\nexport BERTH_API_KEY=%s\n\n", key, key)
		return nil
	}
	return h, keep, nil
}
