package docker

import (
	"berth/runtime"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/moby/moby/api/pkg/authconfig"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/client"
)

// ImageExists reports whether ref is present in the daemon's image store.
func (d *Docker) ImageExists(ctx context.Context, ref string) (bool, error) {
	_, err := d.cli.ImageInspect(ctx, ref)
	switch {
	case err == nil:
		return true, nil
	case IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("inspect image %q: %w", ref, err)
	}
}

// EnsureImage makes ref available locally: a present image is used as is
// (no pull, so local-only images and offline hosts work); otherwise it is
// pulled with auth (may be nil). progress, if not nil, receives one line per
// pull status change.
func (d *Docker) EnsureImage(ctx context.Context, ref string, auth *runtime.RegistryAuth, progress func(msg string)) error {
	ok, err := d.ImageExists(ctx, ref)
	if err != nil {
		return err
	}
	if ok {
		return nil
	}
	opts := client.ImagePullOptions{}
	if auth != nil {
		enc, err := encodeRegistryAuth(ref, *auth)
		if err != nil {
			return fmt.Errorf("pull image %q: %w", ref, err)
		}
		opts.RegistryAuth = enc
	}
	d.log.Info("pulling image", "ref", ref)
	start := time.Now()
	err = d.pull(ctx, ref, opts, progress)
	if d.OnPull != nil {
		d.OnPull(ref, time.Since(start), err)
	}
	return err
}

func (d *Docker) pull(ctx context.Context, ref string, opts client.ImagePullOptions, progress func(msg string)) error {
	resp, err := d.cli.ImagePull(ctx, ref, opts)
	if err != nil {
		return fmt.Errorf("pull image %q: %w", ref, err)
	}
	defer resp.Close()
	// The daemon answers 200 before pulling; failures arrive in the stream.
	if err := readJSONStream(resp, progress); err != nil {
		return fmt.Errorf("pull image %q: %w", ref, err)
	}
	// A stream that ends early (daemon restart) carries no error: check.
	if ok, err := d.ImageExists(ctx, ref); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("pull image %q: stream ended but the image is not present", ref)
	}
	return nil
}

// RemoveImage untags and deletes ref. It fails while a container uses the
// image; an image that is already gone is not an error.
func (d *Docker) RemoveImage(ctx context.Context, ref string) error {
	_, err := d.cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{PruneChildren: true})
	if err != nil && !IsNotFound(err) {
		return fmt.Errorf("remove image %q: %w", ref, err)
	}
	return nil
}

// encodeRegistryAuth builds the X-Registry-Auth value (base64url JSON) for
// the registry that hosts ref.
func encodeRegistryAuth(ref string, auth runtime.RegistryAuth) (string, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", fmt.Errorf("parse image reference: %w", err)
	}
	server := reference.Domain(named)
	if server == "docker.io" {
		// Docker Hub's credentials are keyed by the v1 index URL (as the CLI does).
		server = "https://index.docker.io/v1/"
	}
	return authconfig.Encode(registry.AuthConfig{
		Username:      auth.Username,
		Password:      auth.Password,
		ServerAddress: server,
	})
}

// streamMessage is one line of a pull/import/load progress stream. Old
// daemons send the failure in "error" as well as "errorDetail".
type streamMessage struct {
	Status string          `json:"status"`
	ID     string          `json:"id"`
	Stream string          `json:"stream"`
	Aux    json.RawMessage `json:"aux"` // a push's {"Tag","Digest","Size"}
	Error  string          `json:"error"`
	Detail *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"errorDetail"`
}

// StreamError is a failure the daemon reported inside a 200 progress stream.
type StreamError struct{ Message string }

func (e *StreamError) Error() string { return e.Message }

// eachMessage decodes a Docker JSON progress stream to its end, handing
// fn each message; the first error the daemon reports in it ends it
// (what names the stream in a read error).
func eachMessage(r io.Reader, what string, fn func(streamMessage)) error {
	dec := json.NewDecoder(r)
	for {
		var m streamMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read %s: %w", what, err)
		}
		if m.Detail != nil && m.Detail.Message != "" {
			return &StreamError{Message: m.Detail.Message}
		}
		if m.Error != "" {
			return &StreamError{Message: m.Error}
		}
		fn(m)
	}
}

// readJSONStream consumes a Docker JSON progress stream to its end and
// returns the first error in it. progress gets de-duplicated status lines.
func readJSONStream(r io.Reader, progress func(string)) error {
	last := map[string]string{} // layer id -> last reported status
	return eachMessage(r, "progress stream", func(m streamMessage) {
		if progress == nil {
			return
		}
		// Byte counters change on every tick; report status changes only.
		status := strings.TrimSpace(m.Status + m.Stream)
		if status == "" || last[m.ID] == status {
			return
		}
		last[m.ID] = status
		if m.ID != "" {
			status = m.ID + ": " + status
		}
		progress(status)
	})
}
