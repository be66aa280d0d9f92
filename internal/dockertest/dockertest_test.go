package dockertest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
)

const hello = "berth/internal/dockertest/testdata/hello"

func TestBuildGoImage(t *testing.T) {
	cli := Require(t)
	var ref string
	t.Run("build", func(t *testing.T) {
		ref = BuildGoImage(t, hello, "ENV WHO=docker")
		if !strings.HasPrefix(ref, "berth-test/hello:") {
			t.Fatalf("ref %q", ref)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		img, err := cli.ImageInspect(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		if img.Config == nil || !slices.Equal(img.Config.Entrypoint, []string{"/app"}) ||
			!slices.Contains(img.Config.Env, "WHO=docker") {
			t.Fatalf("image config %+v", img.Config)
		}
		// A second image of the same package reuses the compiled binary.
		begin := time.Now()
		ref2 := BuildGoImage(t, hello)
		if ref2 == ref {
			t.Fatal("refs are not unique")
		}
		t.Logf("cached build+import took %v", time.Since(begin))
	})
	// The subtest's cleanup removed its images.
	_, err := cli.ImageInspect(context.Background(), ref)
	if !cerrdefs.IsNotFound(err) {
		t.Fatalf("image %s still present after cleanup: %v", ref, err)
	}
}

func TestCompileError(t *testing.T) {
	if _, err := compile("berth/internal/dockertest/testdata/nonexistent"); err == nil {
		t.Fatal("building a missing package succeeded")
	}
}

func TestRepoName(t *testing.T) {
	for in, want := range map[string]string{
		"berth/testdata/echoworker": "echoworker",
		"./testdata/Sig_Prog":       "sig-prog",
		"berth/x/v2.1":              "v2-1",
		"___":                       "prog",
	} {
		if got := repoName(in); got != want {
			t.Errorf("repoName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReadStream(t *testing.T) {
	if err := readStream(strings.NewReader(`{"status":"sha256:abc"}`)); err != nil {
		t.Fatal(err)
	}
	err := readStream(strings.NewReader(`{"status":"x"}{"errorDetail":{"message":"bad tar"},"error":"bad tar"}`))
	if err == nil || err.Error() != "bad tar" {
		t.Fatalf("got %v", err)
	}
	if err := readStream(strings.NewReader(`{"error":"old style"}`)); err == nil {
		t.Fatal("old-style error missed")
	}
}

func TestUnique(t *testing.T) {
	if a, b := Unique("x-"), Unique("x-"); a == b || !strings.HasPrefix(a, "x-") {
		t.Fatalf("%q %q", a, b)
	}
}
