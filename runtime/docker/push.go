package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/distribution/reference"
	"github.com/moby/moby/client"

	"berth/runtime"
)

// PushImage tags the local image local as remote (a name:tag in a
// registry) and pushes it with auth (nil: anonymous). It returns the
// manifest digest the registry stored ("sha256:…"). line gets the push's
// status changes. The registry's refusal (bad credentials, no such
// repository) arrives inside the daemon's stream: it is returned as a
// *StreamError. Cancelling ctx closes the request, which stops the push.
func (d *Docker) PushImage(ctx context.Context, local, remote string, auth *runtime.RegistryAuth, line func(string)) (string, error) {
	named, err := reference.ParseNormalizedNamed(remote)
	if err != nil {
		return "", fmt.Errorf("push %q: %w", remote, err)
	}
	tagged, ok := named.(reference.NamedTagged)
	if !ok {
		return "", fmt.Errorf("push %q: a name:tag is needed", remote)
	}
	if _, err := d.cli.ImageTag(ctx, client.ImageTagOptions{Source: local, Target: remote}); err != nil {
		return "", fmt.Errorf("tag %s as %s: %w", local, remote, err)
	}
	opts := client.ImagePushOptions{}
	if auth != nil {
		if opts.RegistryAuth, err = encodeRegistryAuth(remote, *auth); err != nil {
			return "", fmt.Errorf("push %q: %w", remote, err)
		}
	} else {
		// An empty login: without one, old daemons answer "Bad parameters
		// and missing X-Registry-Auth".
		opts.RegistryAuth = "e30=" // base64 of {}
	}
	res, err := d.cli.ImagePush(ctx, remote, opts)
	if err != nil {
		return "", fmt.Errorf("push %s: %w", remote, err)
	}
	defer res.Close()
	var digest string
	last := map[string]string{}
	err = eachMessage(res, "push progress", func(m streamMessage) {
		if m.Aux != nil {
			var aux struct {
				Tag, Digest string
			}
			if json.Unmarshal(m.Aux, &aux) == nil && aux.Tag == tagged.Tag() && strings.HasPrefix(aux.Digest, "sha256:") {
				digest = aux.Digest
			}
		}
		status := strings.TrimSpace(m.Status)
		if line == nil || status == "" || last[m.ID] == status {
			return
		}
		last[m.ID] = status
		if m.ID != "" {
			status = m.ID + ": " + status
		}
		line(status)
	})
	if err != nil {
		return "", fmt.Errorf("push %s: %w", remote, err)
	}
	if digest == "" {
		// A stream cut short (a daemon restart) carries neither an error
		// nor the digest.
		return "", fmt.Errorf("push %s: the daemon's answer ended without the pushed digest", remote)
	}
	return digest, nil
}
