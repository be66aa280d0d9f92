package app

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"

	"berth/mgmt"
	"berth/store"
)

// apiKeys works out the keys Berth starts with. key (BERTH_API_KEY, when
// given) is an All key kept in memory only: envHash is its hash. The key
// generated on first start by an older Berth (its hash in Meta) is
// migrated to the stored All key "operator" (mgmt.SetupKeys, called with
// operatorHash once the management rules exist). Without either and
// without a stored key, a key is generated — but neither stored nor
// shown here: keep, called by Start once Berth serves, stores it as the
// "operator" key and shows it once on notice, so a start that fails (its
// port in use, a bad --apply file) does not use up the one showing, and
// the next start generates and shows a key. keep is nil when there is
// nothing to store.
func (a *App) apiKeys(db *store.DB, key string, notice io.Writer, log *slog.Logger) (envHash, operatorHash string, keep func() error, err error) {
	if key != "" {
		return mgmt.HashKey(key), "", nil, nil
	}
	var stored []byte
	keys := 0
	db.View(func(tx *store.Tx) error {
		stored = tx.GetRaw(store.Meta, "api_key_hash")
		return tx.ForEachKey(store.APIKeys, func(string) error { keys++; return nil })
	})
	if stored != nil {
		log.Info("using the API key generated on first start (set BERTH_API_KEY to use another)")
		return "", string(stored), nil, nil
	}
	if keys > 0 {
		log.Info("using the stored API keys (berth key list): the key generated on first start, unless deleted, and those made since (set BERTH_API_KEY to add one)", "keys", keys)
		return "", "", nil, nil
	}
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		return "", "", nil, fmt.Errorf("generate the API key: %w", err)
	}
	key = "berth_" + hex.EncodeToString(b)
	h := mgmt.HashKey(key)
	keep = func() error {
		if err := a.mg.SetupKeys("", h); err != nil {
			return fmt.Errorf("store the API key's hash: %w", err)
		}
		fmt.Fprintf(notice, "\nYour Berth API key (shown only this once; only its hash is stored):\n\n    %s\n\nexport BERTH_API_KEY=%s\n\nMore keys, Read Only or Restricted to endpoints: berth key create --help\n\n", key, key)
		return nil
	}
	return "", "", keep, nil
}
