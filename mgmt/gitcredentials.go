package mgmt

import (
	"context"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"berth/queue"
	"berth/store"
)

// Git credentials: what a build clones a private repository with — a
// token (https) or an SSH private key with the host keys it trusts (ssh).
// Like a registry auth's password, the secret is write-only: no answer,
// log or build log holds it.

// GitCredentialInput creates a git credential: Name and Secret always;
// Kind TOKEN (Username optional: "git") or SSH_KEY (Secret a PEM/OpenSSH
// private key without a passphrase, KnownHosts the server's host keys in
// known_hosts form, required: Berth trusts no host key it was not given).
type GitCredentialInput struct {
	Name       string
	Kind       string
	Username   string
	Secret     string
	KnownHosts string
}

// GitCredential is what the API shows of one: never the secret.
type GitCredential struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"`
	Kind       string    `json:"kind"`
	Username   *string   `json:"username"`
	KnownHosts *string   `json:"knownHosts"`
	CreatedAt  time.Time `json:"createdAt"`
}

func viewGitCredential(c store.GitCredential) GitCredential {
	v := GitCredential{ID: c.ID, Name: c.Name, Kind: c.Kind, CreatedAt: c.CreatedAt}
	if c.Username != "" {
		v.Username = &c.Username
	}
	if c.KnownHosts != "" {
		v.KnownHosts = &c.KnownHosts // public host keys: not a secret
	}
	return v
}

// checkGitCredential checks a credential's input.
func checkGitCredential(in GitCredentialInput) error {
	if err := checkName(in.Name); err != nil {
		return err
	}
	if strings.TrimSpace(in.Secret) == "" {
		return invalid("secret", "secret is required: the token, or the SSH private key")
	}
	if len(in.Secret) > 16<<10 {
		return invalid("secret", "secret is over 16 KiB")
	}
	if len(in.Username) > 255 {
		return invalid("username", "username is over 255 bytes")
	}
	if err := CheckText("username", in.Username, false); err != nil {
		return err
	}
	switch in.Kind {
	case store.GitCredentialToken:
		if in.KnownHosts != "" {
			return invalid("knownHosts", "knownHosts is for a %s credential", store.GitCredentialSSHKey)
		}
		if err := CheckText("secret", in.Secret, false); err != nil {
			return invalid("secret", "secret: a token is one line of printable text")
		}
	case store.GitCredentialSSHKey:
		if _, err := ssh.ParsePrivateKey([]byte(in.Secret)); err != nil {
			return invalid("secret", "secret is not an SSH private key without a passphrase (PEM or OpenSSH)")
		}
		if strings.TrimSpace(in.KnownHosts) == "" {
			return invalid("knownHosts", "knownHosts is required for an %s credential: the server's host keys as ssh-keyscan prints them", store.GitCredentialSSHKey)
		}
		if len(in.KnownHosts) > 64<<10 {
			return invalid("knownHosts", "knownHosts is over 64 KiB")
		}
		if err := CheckText("knownHosts", in.KnownHosts, true); err != nil {
			return err
		}
		rest := []byte(in.KnownHosts)
		for len(strings.TrimSpace(string(rest))) > 0 {
			var err error
			if _, _, _, _, rest, err = ssh.ParseKnownHosts(rest); err != nil {
				return invalid("knownHosts", "knownHosts is not in known_hosts form: %v", err)
			}
		}
	default:
		return invalid("kind", "kind must be %s or %s, got %s", store.GitCredentialToken, store.GitCredentialSSHKey, quote(ShortID(in.Kind)))
	}
	return nil
}

// CreateGitCredential stores a git credential; names are unique.
func (s *Service) CreateGitCredential(ctx context.Context, in GitCredentialInput) (GitCredential, error) {
	if err := live(ctx); err != nil {
		return GitCredential{}, err
	}
	if err := checkGitCredential(in); err != nil {
		return GitCredential{}, err
	}
	c := store.GitCredential{ID: "gitcred_" + queue.NewID(12), Name: in.Name, Kind: in.Kind, Username: in.Username, Secret: in.Secret,
		KnownHosts: in.KnownHosts, CreatedAt: s.now()}
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		cs, err := all[store.GitCredential](tx, store.GitCredentials)
		if err != nil {
			return err
		}
		for _, o := range cs {
			if o.Name == c.Name {
				return conflict("a git credential named %q already exists (%s)", c.Name, o.ID)
			}
		}
		return tx.Apply(store.Put(store.GitCredentials, c.ID, c))
	})
	if err != nil {
		return GitCredential{}, err
	}
	return viewGitCredential(c), nil
}

// ListGitCredentials lists them oldest first, without their secrets.
func (s *Service) ListGitCredentials(ctx context.Context) ([]GitCredential, error) {
	if err := live(ctx); err != nil {
		return nil, err
	}
	var cs []store.GitCredential
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		cs, err = all[store.GitCredential](tx, store.GitCredentials)
		return err
	})
	byCreated(cs, func(c store.GitCredential) time.Time { return c.CreatedAt }, func(c store.GitCredential) string { return c.ID })
	out := make([]GitCredential, 0, len(cs))
	for _, c := range cs {
		out = append(out, viewGitCredential(c))
	}
	return out, err
}

// DeleteGitCredential deletes one; builds naming it fail to clone after.
func (s *Service) DeleteGitCredential(ctx context.Context, id string) error {
	if err := live(ctx); err != nil {
		return err
	}
	return s.cfg.Store.Update(func(tx *store.Tx) error {
		if tx.GetRaw(store.GitCredentials, id) == nil {
			return notFoundID("git credential", id)
		}
		return tx.Apply(store.Delete(store.GitCredentials, id))
	})
}
