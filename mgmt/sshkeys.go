package mgmt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"berth/store"
)

// The account's SSH public keys (REST v2 account/ssh-keys). Pods asking
// for SSH (startSsh, theirs or their template's) get them in PUBLIC_KEY,
// one per line, as RunPod injects them; images that honour the convention
// start sshd with them.

const sshKeysKey = "ssh_keys"

var sshKeyRe = regexp.MustCompile(`^(ssh|ecdsa|sk)-[^\s]+ [^\s]+([ \t][^\n\r]*)?$`)

// SSHKeys returns the stored keys ([] when none).
func (s *Service) SSHKeys(ctx context.Context) ([]string, error) {
	if err := live(ctx); err != nil {
		return nil, err
	}
	keys := []string{}
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		if tx.GetRaw(store.Meta, sshKeysKey) == nil {
			return nil
		}
		return tx.Get(store.Meta, sshKeysKey, &keys)
	})
	return keys, err
}

// SetSSHKeys replaces the keys; each must look like an OpenSSH public key.
func (s *Service) SetSSHKeys(ctx context.Context, keys []string) ([]string, error) {
	if err := live(ctx); err != nil {
		return nil, err
	}
	if err := LimitSSHKeys.CheckCount("keys", len(keys)); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(keys))
	for i, k := range keys {
		k = strings.TrimSpace(k)
		if err := LimitSSHKeyLen.CheckLen(fmt.Sprintf("keys[%d]", i), k); err != nil {
			return nil, reField(err, "keys")
		}
		if err := CheckText(fmt.Sprintf("keys[%d]", i), k, false); err != nil {
			return nil, reField(err, "keys")
		}
		if !sshKeyRe.MatchString(k) {
			return nil, invalid("keys", "keys[%d] is not an OpenSSH public key (\"ssh-ed25519 AAAA… comment\")", i)
		}
		out = append(out, k)
	}
	err := s.cfg.Store.Update(func(tx *store.Tx) error { return tx.Apply(store.Put(store.Meta, sshKeysKey, out)) })
	return out, err
}

// injectAccess adds PUBLIC_KEY (the account's keys) and JUPYTER_PASSWORD
// to a new pod's env when asked for and not already set.
func injectAccess(tx *store.Tx, p *store.Pod, ssh, jupyter bool) error {
	if p.Env == nil {
		p.Env = map[string]string{}
	}
	if _, set := p.Env["PUBLIC_KEY"]; ssh && !set && tx.GetRaw(store.Meta, sshKeysKey) != nil {
		var keys []string
		if err := tx.Get(store.Meta, sshKeysKey, &keys); err != nil {
			return err
		}
		if len(keys) > 0 {
			p.Env["PUBLIC_KEY"] = strings.Join(keys, "\n")
		}
	}
	if _, set := p.Env["JUPYTER_PASSWORD"]; jupyter && !set {
		b := make([]byte, 12)
		rand.Read(b)
		p.Env["JUPYTER_PASSWORD"] = hex.EncodeToString(b)
	}
	return nil
}
