package docker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"berth/internal/dockertest"
	"berth/runtime"
)

func TestNewDockerInfo(t *testing.T) {
	d := newDocker(t)
	if err := d.Ping(testCtx(t)); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	in := d.Info()
	if d.APIVersion() == "" || in.APIVersion != d.APIVersion() {
		t.Fatalf("API version %q / %q", d.APIVersion(), in.APIVersion)
	}
	t.Logf("daemon %s api %s storage %s runtimes %v cdi %v %v",
		in.ServerVersion, in.APIVersion, in.StorageDriver, in.Runtimes, in.CDIEnabled, in.CDISpecDirs)
}

func TestNewDockerNoDaemon(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/berth-docker.sock")
	t.Setenv("DOCKER_API_VERSION", "")
	_, err := Connect(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "not reachable") {
		t.Fatalf("want a 'not reachable' error, got %v", err)
	}
}

func TestEnsureImage(t *testing.T) {
	t.Parallel()
	d := newDocker(t)
	ref := dockertest.BuildGoImage(t, testProg)
	ctx := testCtx(t)

	var lines []string
	if err := d.EnsureImage(ctx, ref, nil, func(s string) { lines = append(lines, s) }); err != nil {
		t.Fatalf("EnsureImage of a local image: %v", err)
	}
	if len(lines) != 0 {
		t.Fatalf("a local image must not be pulled; progress: %v", lines)
	}

	// Nothing listens on port 1: the pull fails at once, with no registry.
	missing := "127.0.0.1:1/berth-missing/none:" + dockertest.Unique("t")
	if ok, err := d.ImageExists(ctx, missing); err != nil || ok {
		t.Fatalf("ImageExists(missing) = %v, %v", ok, err)
	}
	err := d.EnsureImage(ctx, missing, &runtime.RegistryAuth{Username: "u", Password: "p"}, nil)
	if err == nil {
		t.Fatal("EnsureImage of a missing image without a registry succeeded")
	}
	if !strings.Contains(err.Error(), missing) {
		t.Fatalf("error does not name the image: %v", err)
	}
	t.Logf("missing image error: %v", err)

	if err := d.RemoveImage(ctx, missing); err != nil {
		t.Fatalf("RemoveImage of a missing image: %v", err)
	}
}

func TestRemoveImage(t *testing.T) {
	t.Parallel()
	d := newDocker(t)
	ref := dockertest.BuildGoImage(t, testProg)
	ctx := testCtx(t)
	if err := d.RemoveImage(ctx, ref); err != nil {
		t.Fatalf("RemoveImage: %v", err)
	}
	if ok, err := d.ImageExists(ctx, ref); err != nil || ok {
		t.Fatalf("after remove: exists=%v err=%v", ok, err)
	}
}

func TestEncodeRegistryAuth(t *testing.T) {
	for ref, server := range map[string]string{
		"ubuntu:22.04":                       "https://index.docker.io/v1/",
		"docker.io/runpod/worker:1":          "https://index.docker.io/v1/",
		"ghcr.io/org/img:tag":                "ghcr.io",
		"localhost:5000/a/b@sha256:" + hex64: "localhost:5000",
	} {
		enc, err := encodeRegistryAuth(ref, runtime.RegistryAuth{Username: "user", Password: "p@ss"})
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		raw, err := base64.URLEncoding.DecodeString(enc)
		if err != nil {
			t.Fatalf("%s: not base64url: %v", ref, err)
		}
		var got map[string]string
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		want := map[string]string{"username": "user", "password": "p@ss", "serveraddress": server}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s = %q, want %q", ref, k, got[k], v)
			}
		}
	}
	if _, err := encodeRegistryAuth("Bad Ref", runtime.RegistryAuth{}); err == nil {
		t.Error("invalid reference accepted")
	}
}

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestReadJSONStream(t *testing.T) {
	ok := `{"status":"Pulling from a/b","id":"1"}
{"status":"Pulling fs layer","id":"l1"}
{"status":"Downloading","id":"l1","progressDetail":{"current":1,"total":9},"progress":"[=>  ] 1B/9B"}
{"status":"Downloading","id":"l1","progressDetail":{"current":5,"total":9},"progress":"[==> ] 5B/9B"}
{"status":"Download complete","id":"l1"}
{"status":"Status: Downloaded newer image for a/b:1"}`
	var lines []string
	if err := readJSONStream(strings.NewReader(ok), func(s string) { lines = append(lines, s) }); err != nil {
		t.Fatal(err)
	}
	want := []string{"1: Pulling from a/b", "l1: Pulling fs layer", "l1: Downloading", "l1: Download complete",
		"Status: Downloaded newer image for a/b:1"}
	if !slices.Equal(lines, want) {
		t.Fatalf("progress lines\n got %q\nwant %q", lines, want)
	}

	for name, in := range map[string]string{
		"errorDetail": `{"status":"x"}{"errorDetail":{"message":"manifest unknown"},"error":"manifest unknown"}{"status":"y"}`,
		"error only":  `{"status":"x"}{"error":"manifest unknown"}`,
	} {
		err := readJSONStream(strings.NewReader(in), nil)
		var se *StreamError
		if !errors.As(err, &se) || se.Message != "manifest unknown" {
			t.Errorf("%s: got %v", name, err)
		}
	}
	if err := readJSONStream(strings.NewReader(`{"status":`), nil); err == nil {
		t.Error("truncated stream accepted")
	}
}

func TestEnsureImageCancelled(t *testing.T) {
	t.Parallel()
	d := newDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	if err := d.EnsureImage(ctx, "127.0.0.1:1/x:y", nil, nil); err == nil {
		t.Fatal("EnsureImage with a dead context succeeded")
	}
}
