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
// serve passes BERTH_API_KEY), otherwise the key generated on first start,
// stored hashed and shown once on notice.
func apiKeyHash(db *store.DB, key string, notice io.Writer, log *slog.Logger) (string, error) {
	if key != "" {
		return httpapi.HashKey(key), nil
	}
	var stored []byte
	db.View(func(tx *store.Tx) error { stored = tx.GetRaw(store.Meta, "api_key_hash"); return nil })
	if stored != nil {
		log.Info("using the API key generated on first start (set BERTH_API_KEY to use another)")
		return string(stored), nil
	}
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	key = "berth_" + hex.EncodeToString(b)
	h := httpapi.HashKey(key)
	if err := db.Write(store.PutRaw(store.Meta, "api_key_hash", []byte(h))); err != nil {
		return "", err
	}
	fmt.Fprintf(notice, "\nYour Berth API key (shown only this once; only its hash is stored):\n\n    %s\n\nexport BERTH_API_KEY=%s\n\n", key, key)
	return h, nil
}
